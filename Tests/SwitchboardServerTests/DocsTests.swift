import Foundation
import SwitchboardProtocol
import SwitchboardServer
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
