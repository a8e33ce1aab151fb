import Foundation

/// The repository's root folder (tests read the web client and docs from it).
public let repositoryRoot: String = {
    var url = URL(fileURLWithPath: #filePath)
    for _ in 0..<3 { url.deleteLastPathComponent() }
    return url.path
}()

/// The folder of the built executables, for tests that run them as processes: next to the
/// test bundle, or `SWITCHBOARD_PRODUCTS`.
public let productsDirectory: String = {
    if let override = ProcessInfo.processInfo.environment["SWITCHBOARD_PRODUCTS"] { return override }
    var url = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    while url.path != "/" {
        if FileManager.default.isExecutableFile(atPath: url.appendingPathComponent("switchboard").path) { return url.path }
        url.deleteLastPathComponent()
    }
    return repositoryRoot + "/.build/debug"
}()
