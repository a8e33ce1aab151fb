import Foundation
import SwitchboardProtocol
@testable import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing

/// The docs list what the code has; these fail when one changes without the other.
@Suite(.timeLimit(.minutes(3))) struct DocsTests {
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

@Suite(.timeLimit(.minutes(3))) struct OpenAPITests {
    /// The OpenAPI document lists exactly the routes the router has (`Gateway.restRoutes`, which
    /// it routes through), with their methods; each answers on the running server, and the
    /// document is served.
    @Test func theOpenAPIDocumentListsEveryRouteAndIsServed() async throws {
        let text = try String(contentsOfFile: repositoryRoot + "/web/openapi.json", encoding: .utf8)
        let document = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        #expect(document["openapi"] == "3.0.3")
        let paths = try #require(document["paths"]?.objectValue)
        var documented: [String: Set<String>] = [:]
        for (path, operations) in paths {
            documented[path] = Set((operations.objectValue ?? [:]).keys.filter { ["get", "put", "post", "delete", "patch"].contains($0) }.map { $0.uppercased() })
        }
        var routed: [String: Set<String>] = [:]
        for route in Gateway.restRoutes { routed[route.template] = Set(route.methods.filter { $0 != .head }.map(\.rawValue)) }
        #expect(documented == routed, "web/openapi.json and Gateway.restRoutes differ: \(documented.filter { routed[$0.key] != $0.value }) vs \(routed.filter { documented[$0.key] != $0.value })")

        let server = try TestServer()
        defer { server.stop() }
        let versioned = try await HTTPClient.request("GET", server.baseURL + "/v1/openapi.json")
        #expect(versioned.status == 200)
        #expect(versioned.text.contains(#""openapi""#))
        let served = try await HTTPClient.request("GET", server.baseURL + "/openapi.json")
        #expect(served.status == 200)
        #expect(served.headers["content-type"] == "application/json")
        // Every route and method reaches a handler (whatever it then says of the request), and
        // every other method is refused with the route's own Allow.
        for route in Gateway.restRoutes where route.template != "/v1/dev/tokens" {
            let path = route.template.replacing(/\{[a-z_]+\}/, with: "x")
            for method in ["GET", "POST", "PUT", "DELETE"] {
                let response = try await HTTPClient.request(method, server.baseURL + path, body: method == "GET" || method == "DELETE" ? nil : Array("{}".utf8))
                if route.methods.map(\.rawValue).contains(method) {
                    #expect(response.status != 405 && !response.text.contains("no such endpoint"), "\(method) \(path): \(response.status) \(response.text)")
                } else {
                    #expect(response.status == 405, "\(method) \(path): \(response.status)")
                    #expect(response.headers["allow"] == route.allow, "\(method) \(path)")
                }
            }
        }
        let unknown = try await HTTPClient.request("GET", server.baseURL + "/v1/calls/x/nothing")
        #expect(unknown.status == 404 && unknown.text.contains("no such endpoint"), "\(unknown.text)")
    }

    /// A route's template gives its handler the path's parameters, one whole segment each;
    /// a path with an empty segment or a segment more is not the route's.
    /// Every string a client sends has a documented limit (`maxLength`, an `enum` or a
    /// `pattern`): in request bodies, path, query and header parameters. A field added
    /// without one fails here.
    @Test func everyStringARequestCarriesHasALimitInTheDocument() throws {
        let text = try String(contentsOfFile: repositoryRoot + "/web/openapi.json", encoding: .utf8)
        let document = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        let schemas = try #require(document["components"]?["schemas"]?.objectValue)
        var unbounded: [String] = []
        func check(_ schema: JSONValue?, at place: String, depth: Int = 0) {
            guard let schema, depth < 12 else { return }
            if case .string(let reference)? = schema["$ref"] {
                return check(schemas[String(reference.split(separator: "/").last ?? "")], at: place, depth: depth + 1)
            }
            if schema["type"] == "string", schema["maxLength"] == nil, schema["enum"] == nil, schema["pattern"] == nil {
                unbounded.append(place)
            }
            for (name, property) in schema["properties"]?.objectValue ?? [:] { check(property, at: place + "." + name, depth: depth + 1) }
            check(schema["items"], at: place + "[]", depth: depth + 1)
        }
        for (path, operations) in try #require(document["paths"]?.objectValue) {
            guard case .object(let methods) = operations else { continue }
            var shared: [JSONValue] = []
            if case .array(let list)? = methods["parameters"] { shared = list }
            for (method, operation) in methods where ["get", "put", "post", "delete"].contains(method) {
                var parameters = shared
                if case .array(let own)? = operation["parameters"] { parameters += own }
                for parameter in parameters {
                    check(parameter["schema"], at: "\(method) \(path) \(parameter["name"]?.stringValue ?? "?")")
                }
                check(operation["requestBody"]?["content"]?["application/json"]?["schema"], at: "\(method) \(path) body")
            }
        }
        #expect(unbounded.isEmpty, "strings without maxLength, enum or pattern: \(unbounded.sorted())")
    }

    @Test func aRouteHandsItsHandlerThePathsParameters() throws {
        let peers = try #require(Gateway.restRoutes.first { $0.template == "/v1/rooms/{name}/peers/{peer_id}" })
        #expect(peers.match("/v1/rooms/team-1/peers/p_abc") == ["name": "team-1", "peer_id": "p_abc"])
        #expect(peers.match("/v1/rooms//peers/p_abc") == nil)
        #expect(peers.match("/v1/rooms/team-1/peers/p_abc/x") == nil)
        #expect(peers.match("/v1/rooms/team-1/people/p_abc") == nil)
        let health = try #require(Gateway.restRoutes.first { $0.template == "/healthz" })
        #expect(health.match("/healthz") == [:])
        #expect(health.methods == [.get, .head])
    }
}

@Suite(.timeLimit(.minutes(3))) struct SDKDocsTests {
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

@Suite(.timeLimit(.minutes(3))) struct MetricsCatalogTests {
    /// Every metric the code updates is a family with a type and a help line, listed in
    /// docs/protocol.md; a fresh server shows every family, and its plain counters and gauges
    /// at zero, before anything happened.
    @Test func everyFamilyIsTypedDocumentedAndThereFromTheStart() async throws {
        let known = Set(Metrics.families.map(\.name))
        // The names the sources update (metrics.increment("switchboard_..."), hot counters...).
        var used: Set<String> = []
        for folder in ["Sources/SwitchboardServer", "Sources/SwitchboardSystem"] {
            let root = repositoryRoot + "/" + folder
            for case let file as String in FileManager.default.enumerator(atPath: root) ?? .init() where file.hasSuffix(".swift") {
                let text = try String(contentsOfFile: root + "/" + file, encoding: .utf8)
                for match in text.matches(of: /(?:increment|set|add|observe|observeRecent|HotCounter)\("(switchboard_[a-z_]+)"/) {
                    used.insert(String(match.1))
                }
            }
        }
        #expect(!used.isEmpty)
        #expect(used.subtracting(known).isEmpty, "updated in the code but not in Metrics.families: \(used.subtracting(known).sorted())")
        let docs = try String(contentsOfFile: repositoryRoot + "/docs/protocol.md", encoding: .utf8)
        for name in known { #expect(docs.contains("`\(name)`"), "docs/protocol.md's metrics table lacks \(name)") }

        let server = try TestServer()
        defer { server.stop() }
        let text = try await HTTPClient.request("GET", server.baseURL + "/metrics").text
        let lines = text.split(separator: "\n").map(String.init)
        for family in Metrics.families {
            #expect(lines.contains("# TYPE \(family.name) \(family.type)"), "\(family.name) has no TYPE line")
            #expect(lines.contains { $0.hasPrefix("# HELP \(family.name) ") && !$0.contains("not in Metrics.families") }, "\(family.name)")
            if ["counter", "gauge"].contains(family.type), family.seeds.count == 1, family.seeds[0].isEmpty {
                #expect(lines.contains { $0.hasPrefix(family.name + " ") }, "\(family.name) has no series before first use")
            }
        }
        #expect(!text.contains("untyped"))
        // Every label value the docs list for a family ("`reason`: `storage`, `blocked`, …") is
        // a series at zero from the start; a family always labelled has no unlabelled series.
        for line in docs.split(separator: "\n") where line.hasPrefix("| `switchboard_") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 3, let name = cells[0].firstMatch(of: /`(switchboard_[a-z_]+)`/)?.1,
                let labelled = cells[2].firstMatch(of: /^`([a-z_]+)`: (.*)$/)
            else { continue }
            let values = labelled.2.matches(of: /`([A-Za-z_0-9]+)`/).map { String($0.1) }
            for value in values {
                #expect(lines.contains { $0.hasPrefix("\(name){\(labelled.1)=\"\(value)\"} ") }, "\(name){\(labelled.1)=\"\(value)\"} is not there from the start")
            }
        }
        for family in Metrics.families where family.seeds.isEmpty {
            #expect(!lines.contains { $0.hasPrefix(family.name + " ") || $0.hasPrefix(family.name + "_count ") || $0.hasPrefix(family.name + "_bucket{le=") },
                "\(family.name) has an unlabelled series")
        }
        #expect(lines.contains("switchboard_calls_total 0"))
        #expect(lines.contains(#"switchboard_errors_total{code="internal"} 0"#))
        #expect(lines.contains(#"switchboard_calls_ended_total{outcome="missed"} 0"#))
        #expect(lines.contains("switchboard_store_writable 1"))
    }
}

/// Every documented limit, error code, close code and push-trace event is exercised by a test
/// that says so: a `Covers:` line (`Covers: limit:max_callees, error:rate_limited`) in a Swift
/// test, an interop test or a test script. A name the docs add without a test, or a `Covers:`
/// naming what the docs no longer have, fails here.
@Suite(.timeLimit(.minutes(3))) struct DocumentedCoverageTests {
    func read(_ path: String) throws -> String {
        try String(contentsOfFile: repositoryRoot + "/" + path, encoding: .utf8)
    }

    /// What the docs promise, as `kind:name`.
    func documented() throws -> Set<String> {
        var names: Set<String> = []
        // docs/configuration.md: every setting whose default is a number (or derived) is a limit.
        for line in try read("docs/configuration.md").split(separator: "\n") {
            guard let match = line.firstMatch(of: /^\| `([a-z0-9_]+)` \| `([0-9]+|derived)` \|/) else { continue }
            names.insert("limit:" + match.1)
        }
        let protocolText = try read("docs/protocol.md")
        let errors = protocolText[protocolText.range(of: "## Errors")!.upperBound...]
        for line in errors.split(separator: "\n").prefix(while: { !$0.hasPrefix("## ") }) {
            guard let match = line.firstMatch(of: /^\| `([a-z_]+)` \| ([^|]*) \| (.*)\|$/) else { continue }
            if match.3.trimmingCharacters(in: .whitespaces).hasPrefix("Reserved") { continue }  // documented as never sent
            names.insert("error:" + match.1)
        }
        let closeCodes = protocolText[protocolText.range(of: "### Close codes the server uses")!.upperBound...]
        for line in closeCodes.split(separator: "\n").prefix(12) {
            guard let match = line.firstMatch(of: /^\| ([0-9, ]+) \|/) else { continue }
            for code in match.1.split(separator: ",") { names.insert("close:" + code.trimmingCharacters(in: .whitespaces)) }
        }
        let calls = try read("docs/calls.md")
        let events = calls[calls.range(of: "Events: `delivered`")!.lowerBound...]
        let paragraph = events.components(separatedBy: "\n\n").first ?? ""
        for match in paragraph.matches(of: /`([a-z_]+)`/) where match.1 != "filter" {
            names.insert("trace:" + match.1)
        }
        return names
    }

    /// What the tests say they cover.
    func covered() throws -> [String: [String]] {
        var found: [String: [String]] = [:]
        let roots = ["Tests", "IntegrationTests/interop", "scripts"]
        for root in roots {
            guard let walker = FileManager.default.enumerator(atPath: repositoryRoot + "/" + root) else { continue }
            for case let path as String in walker where path.hasSuffix(".swift") || path.hasSuffix(".py") || path.hasSuffix(".sh") {
                let text = try read(root + "/" + path)
                // Plain string search: a regex literal built per line here once crashed the
                // runtime's regex parser under the parallel suites.
                for line in text.split(separator: "\n") {
                    guard let marker = line.range(of: "// " + "Covers: ") ?? line.range(of: "# " + "Covers: ") else { continue }
                    for name in line[marker.upperBound...].split(separator: ",") {
                        found[name.trimmingCharacters(in: .whitespaces), default: []].append(root + "/" + path)
                    }
                }
            }
        }
        return found
    }

    @Test func everyDocumentedLimitCodeAndTraceEventHasATest() throws {
        let promised = try documented()
        #expect(promised.count > 60, "the docs' tables were read (\(promised.count) names)")
        #expect(promised.contains("limit:max_callees") && promised.contains("error:internal") && promised.contains("close:1008")
            && promised.contains("trace:ringing_shown"))
        let claims = try covered()
        let missing = promised.subtracting(claims.keys).sorted()
        #expect(missing.isEmpty, "documented, with no test saying `Covers:` for it:\n\(missing.joined(separator: "\n"))")
        let unknown = Set(claims.keys).subtracting(promised).sorted()
        #expect(unknown.isEmpty, "`Covers:` names the docs do not have: \(unknown.map { "\($0) (\(claims[$0]!.joined(separator: ", ")))" })")
    }
}
