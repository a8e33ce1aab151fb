// Directories and lock files, on the C library's file API, with errors that read as sentences.

import Foundation
import Glibc
import SwitchboardProtocol
import SwitchboardSupport

/// A file operation that failed, with the path and the system's reason.
public struct FileError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(description: String) { self.description = description }
}

public enum Files {
    /// Creates `path` and its missing parents (like `mkdir -p`).
    public static func createDirectory(_ path: String) throws(FileError) {
        var prefix = path.hasPrefix("/") ? "/" : ""
        for part in path.split(separator: "/") {
            prefix += part
            defer { prefix += "/" }
            var info = stat()
            if stat(prefix, &info) == 0 {
                guard (info.st_mode & S_IFMT) == S_IFDIR else {
                    throw FileError(description: "cannot create the directory '\(prefix)': a file of that name is in the way")
                }
                continue
            }
            if mkdir(prefix, 0o755) != 0 && errno != EEXIST {
                throw FileError(description: "cannot create the directory '\(prefix)': \(String(cString: strerror(errno)))")
            }
        }
    }

    /// Creates `path` and its parents, and makes `path` itself the owner's only (0700): a data
    /// directory holds secrets. Returns whether an existing directory was opened up to others
    /// and had to be closed.
    @discardableResult
    public static func createPrivateDirectory(_ path: String) throws(FileError) -> Bool {
        try createDirectory(path)
        return try makePrivate(path, mode: 0o700)
    }

    /// Makes an existing file or directory the owner's only (`mode`: 0600 or 0700) when it is
    /// readable or writable by others; returns whether it had to. A missing file is left alone.
    @discardableResult
    public static func makePrivate(_ path: String, mode: mode_t) throws(FileError) -> Bool {
        var info = stat()
        guard stat(path, &info) == 0 else { return false }
        guard info.st_mode & 0o077 != 0 else { return false }
        guard chmod(path, mode) == 0 else {
            throw FileError(description: "cannot make '\(path)' private to its owner: \(String(cString: strerror(errno)))")
        }
        return true
    }

    /// Creates the file at `path` empty and private to its owner (0600) unless it exists.
    public static func createPrivateFile(_ path: String) throws(FileError) {
        let descriptor = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        if descriptor >= 0 {
            close(descriptor)
        } else if errno != EEXIST {
            throw FileError(description: "cannot create '\(path)': \(String(cString: strerror(errno)))")
        }
    }
}

/// An exclusive lock on a directory, held until `release()` or the process ends (the kernel
/// drops it even after `kill -9`). The lock is on the directory itself, so it works on a
/// read-only disk too; who holds it is written, where the disk allows, in `infoFile`, for the
/// refusal of the next one.
public final class DirectoryLock: @unchecked Sendable {
    // Safety: the descriptor is set in init and cleared once by `release`, under `lock`.
    private let lock = Locked<Int32>(-1)
    public let directory: String
    /// Where the holder writes who it is.
    public let infoFile: String

    /// Why the lock could not be taken.
    public enum Failure: Error, Sendable, CustomStringConvertible {
        /// Another process holds it; `holder` is what that process wrote about itself.
        case held(directory: String, holder: String)
        case failed(FileError)

        public var description: String {
            switch self {
            case .held(let directory, let holder): "'\(directory)' is locked by another process (\(holder))"
            case .failed(let error): error.description
            }
        }
    }

    /// Takes the lock on `directory` without waiting, and writes `holder` in `infoFile`.
    public init(directory: String, infoFile: String, holder: String) throws(Failure) {
        self.directory = directory
        self.infoFile = infoFile
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else {
            throw .failed(FileError(description: "cannot open the directory '\(directory)': \(String(cString: strerror(errno)))"))
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let busy = errno == EWOULDBLOCK
            let reason = String(cString: strerror(errno))
            close(fd)
            if busy {
                let holder = (try? String(contentsOfFile: infoFile, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
                throw .held(directory: directory, holder: holder.isEmpty ? "no details" : holder)
            }
            throw .failed(FileError(description: "cannot lock '\(directory)': \(reason)"))
        }
        lock.withLock { $0 = fd }
        update(holder)
    }

    deinit { release() }

    /// Replaces what `infoFile` says about the holder (nothing happens on a read-only disk).
    public func update(_ holder: String) {
        lock.withLock { fd in
            guard fd >= 0 else { return }
            let file = open(infoFile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard file >= 0 else { return }
            let bytes = Array((holder + "\n").utf8)
            _ = bytes.withUnsafeBytes { write(file, $0.baseAddress, $0.count) }
            close(file)
        }
    }

    /// Gives the lock up.
    public func release() {
        lock.withLock { fd in
            guard fd >= 0 else { return }
            close(fd)
            fd = -1
        }
    }
}
