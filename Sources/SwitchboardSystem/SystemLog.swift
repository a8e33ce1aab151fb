import Foundation
import SwitchboardSupport

/// The logger used by C libraries' own diagnostics, which have no context to carry one.
public enum SystemLog {
    private static let current = Locked(Logger())

    public static var logger: Logger {
        get { current.withLock { $0 } }
        set { current.withLock { $0 = newValue } }
    }
}

/// Failures of the system layer.
public enum SystemError: Error, Sendable, CustomStringConvertible {
    case listenFailed(host: String, port: Int)
    case crypto(String)
    case sqlite(code: Int32, message: String)
    case http(String)

    public var description: String {
        switch self {
        case .listenFailed(let host, let port): "cannot listen on \(host):\(port)"
        case .crypto(let message): "crypto: \(message)"
        case .sqlite(let code, let message): "sqlite error \(code): \(message)"
        case .http(let message): "http: \(message)"
        }
    }
}
