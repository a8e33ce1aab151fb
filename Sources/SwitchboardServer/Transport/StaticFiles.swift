import Foundation

/// Maps request paths to files under the web client's folder, refusing anything outside it.
struct StaticFiles {
    struct File {
        var path: String
        var contentType: String
    }

    private let root: String?

    init(root: String) {
        self.root = Self.realPath(root)
    }

    private static let types: [String: String] = [
        "html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8",
        "mjs": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8",
        "json": "application/json", "svg": "image/svg+xml", "png": "image/png", "ico": "image/x-icon",
        "txt": "text/plain; charset=utf-8", "wav": "audio/wav", "webmanifest": "application/manifest+json",
    ]

    /// The file for `path`, or nil when there is none (or it would leave the folder).
    func resolve(_ path: String) -> File? {
        guard let root, !path.contains("\0"), !path.split(separator: "/").contains("..") else { return nil }
        var candidate = root + (path.hasPrefix("/") ? path : "/" + path)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: candidate, isDirectory: &isDirectory) else { return nil }
        if isDirectory.boolValue { candidate += candidate.hasSuffix("/") ? "index.html" : "/index.html" }
        guard let real = Self.realPath(candidate), real.hasPrefix(root + "/"),
            FileManager.default.isReadableFile(atPath: real)
        else { return nil }
        let ext = (real as NSString).pathExtension.lowercased()
        return File(path: real, contentType: Self.types[ext] ?? "application/octet-stream")
    }

    private static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
