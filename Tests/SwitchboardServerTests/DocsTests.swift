import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing

/// The docs list what the code has; these fail when one changes without the other.
@Suite struct DocsTests {
    func read(_ path: String) throws -> String {
        try String(contentsOfFile: repositoryRoot + "/" + path, encoding: .utf8)
    }

    @Test func everySettingIsDocumentedWithItsDefault() throws {
        let text = try read("docs/configuration.md")
        let defaults = ServerConfiguration.defaultValues
        for setting in ServerConfiguration.settings {
            let row = text.split(separator: "\n").first { $0.hasPrefix("| `\(setting.name)` |") }
            let line = try #require(row, "docs/configuration.md has no row for \(setting.name)")
            #expect(line.contains("`\(defaults[setting.name] ?? "?")`"), "\(setting.name): default differs from the docs")
        }
    }

    @Test func everyErrorCodeIsDocumented() throws {
        let text = try read("docs/protocol.md")
        for code in ErrorCode.allCases {
            #expect(text.contains("| `\(code.rawValue)` |"), "docs/protocol.md does not list \(code.rawValue)")
        }
    }
}

@Suite struct OpenAPITests {
    /// Every REST route the gateway answers is in the OpenAPI document, and the document is served.
    @Test func theOpenAPIDocumentListsEveryRouteAndIsServed() async throws {
        let text = try String(contentsOfFile: repositoryRoot + "/web/openapi.json", encoding: .utf8)
        let document = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        #expect(document["openapi"] == "3.0.3")
        let paths = try #require(document["paths"]?.objectValue)
        let expected = [
            "/healthz", "/readyz", "/metrics", "/v1/tokens", "/v1/dev/tokens", "/v1/turn", "/v1/rooms", "/v1/rooms/{name}",
            "/v1/rooms/{name}/data", "/v1/rooms/{name}/peers/{peer_id}", "/v1/devices", "/v1/devices/{device_id}",
            "/v1/users/me/blocked", "/v1/calls", "/v1/calls/{call_id}", "/v1/calls/{call_id}/trace",
            "/v1/calls/{call_id}/answer", "/v1/calls/{call_id}/decline", "/v1/calls/{call_id}/cancel", "/v1/calls/{call_id}/end",
        ]
        for path in expected { #expect(paths[path] != nil, "\(path) is missing from web/openapi.json") }
        #expect(Set(paths.keys) == Set(expected), "the document lists a route the server does not have")

        let server = try TestServer()
        defer { server.stop() }
        let versioned = try await HTTPClient.request("GET", server.baseURL + "/v1/openapi.json")
        #expect(versioned.status == 200)
        #expect(versioned.text.contains(#""openapi""#))
        let served = try await HTTPClient.request("GET", server.baseURL + "/openapi.json")
        #expect(served.status == 200)
        #expect(served.headers["content-type"] == "application/json")
    }
}

@Suite struct SDKDocsTests {
    /// Every public declaration of SwitchboardKit has a `///` summary.
    @Test func everyPublicSymbolOfTheSDKIsDocumented() throws {
        let folder = repositoryRoot + "/Sources/SwitchboardKit"
        var undocumented: [String] = []
        for file in try FileManager.default.contentsOfDirectory(atPath: folder) where file.hasSuffix(".swift") {
            let lines = try String(contentsOfFile: folder + "/" + file, encoding: .utf8).components(separatedBy: "\n")
            for (index, line) in lines.enumerated() {
                let text = line.trimmingCharacters(in: .whitespaces)
                guard text.hasPrefix("public ") || text.hasPrefix("open ") else { continue }
                if text == "public init() {}" { continue }
                var previous = index - 1
                while previous >= 0 && lines[previous].trimmingCharacters(in: .whitespaces).hasPrefix("@") { previous -= 1 }
                if previous < 0 || !lines[previous].trimmingCharacters(in: .whitespaces).hasPrefix("///") {
                    undocumented.append("\(file):\(index + 1): \(text.prefix(80))")
                }
            }
        }
        #expect(undocumented.isEmpty, "\(undocumented.joined(separator: "\n"))")
    }
}
