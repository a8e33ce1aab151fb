// The fuzzing harness of `make fuzz` (see docs/security.md).
//
// Built by `make fuzz` with `-sanitize=fuzzer,address -D FUZZING`: the entry point runs
// libFuzzer's driver, which calls back with inputs for the target named by
// SWITCHBOARD_FUZZ_TARGET. Built without FUZZING, it replays inputs instead (what `make test`
// does, under AddressSanitizer, with every seed and committed regression input):
//
//   switchboard-fuzz replay TARGET FILE_OR_DIRECTORY...

import Foundation

#if FUZZING
internal import CShims

let selectedTarget: @Sendable ([UInt8]) -> Void = {
    let name = ProcessInfo.processInfo.environment["SWITCHBOARD_FUZZ_TARGET"] ?? ""
    guard let target = FuzzTargets.all[name] else {
        FileHandle.standardError.write(Data("SWITCHBOARD_FUZZ_TARGET must be one of: \(FuzzTargets.all.keys.sorted().joined(separator: ", "))\n".utf8))
        exit(2)
    }
    return target
}()

/// What libFuzzer calls with each input (its runtime refers to this symbol by name).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    selectedTarget(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
    return 0
}

/// The executable's entry point (SwiftPM links `main` to `<module>_main`): hands control to
/// libFuzzer's driver with the callback it calls for every input.
@_cdecl("switchboard_fuzz_main")
public func fuzzMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    var count = argc
    var vector = argv
    return LLVMFuzzerRunDriver(&count, &vector) { data, size in fuzzOneInput(data, size) }
}
#else
@main
enum Replay {
    /// Replays every input of every FILE_OR_DIRECTORY (dotfiles such as `.keep` aside) through
    /// the target. Fails, naming it, on a path that does not exist or when there was nothing to
    /// replay: a replay that runs nothing must not pass.
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        guard arguments.count >= 3, arguments[0] == "replay", let target = FuzzTargets.all[arguments[1]] else {
            fail("usage: switchboard-fuzz replay TARGET FILE_OR_DIRECTORY...\ntargets: \(FuzzTargets.all.keys.sorted().joined(separator: ", "))", status: 2)
        }
        var counts: [String] = []
        var replayed = 0
        for path in arguments.dropFirst(2) {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
                fail("\(arguments[1]): \(path) does not exist (every target has a seeds and a regressions folder)")
            }
            let files = isDirectory.boolValue
                ? ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).filter { !$0.hasPrefix(".") }.sorted().map { path + "/" + $0 }
                : [path]
            for file in files {
                guard let data = FileManager.default.contents(atPath: file) else { fail("\(arguments[1]): cannot read \(file)") }
                target(Array(data))
            }
            replayed += files.count
            counts.append("\(files.count) from \(path)")
        }
        guard replayed > 0 else { fail("\(arguments[1]): nothing to replay in \(arguments.dropFirst(2).joined(separator: ", "))") }
        print("\(arguments[1]): replayed \(replayed) inputs (\(counts.joined(separator: ", ")))")
    }

    static func fail(_ message: String, status: Int32 = 1) -> Never {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        exit(status)
    }
}
#endif
