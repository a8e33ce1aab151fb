import Foundation

/// A parsed command line: `--name value`, `--name=value`, bare `--flag`s and positionals.
struct Arguments {
    private(set) var options: [String: [String]] = [:]
    private(set) var flags: Set<String> = []
    private(set) var positionals: [String] = []

    /// `valued` names the options that take a value; any other `--name` is a flag.
    init(_ arguments: some Sequence<String>, valued: Set<String>) throws {
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            guard argument.hasPrefix("--"), argument.count > 2 else {
                positionals.append(argument)
                continue
            }
            let body = argument.dropFirst(2)
            if let equals = body.firstIndex(of: "=") {
                let name = String(body[..<equals])
                guard valued.contains(name) else { throw UsageError("--\(name) takes no value") }
                options[name, default: []].append(String(body[body.index(after: equals)...]))
            } else if valued.contains(String(body)) {
                guard let value = iterator.next() else { throw UsageError("--\(body) needs a value") }
                options[String(body), default: []].append(value)
            } else {
                flags.insert(String(body))
            }
        }
    }

    func value(_ name: String) -> String? { options[name]?.last }
    func values(_ name: String) -> [String] { options[name] ?? [] }
    func has(_ name: String) -> Bool { flags.contains(name) }

    func required(_ name: String) throws -> String {
        guard let value = value(name), !value.isEmpty else { throw UsageError("--\(name) is required") }
        return value
    }

    /// Fails on a flag not in `known`.
    func rejectUnknownFlags(_ known: Set<String>) throws {
        if let unknown = flags.subtracting(known).sorted().first { throw UsageError("unknown option --\(unknown)") }
    }
}

/// A mistake on the command line: printed with the command's usage, exit status 2.
struct UsageError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
