// Stub of AVFAudio's AVAudioSession (re-exported by AVFoundation), declarations only, written by
// hand from developer.apple.com/documentation/avfaudio/avaudiosession. See ../README.md.

@_exported import Foundation

/// The app's audio session (iOS 3+; not available on macOS).
@available(macOS, unavailable)
open class AVAudioSession: NSObject, @unchecked Sendable {
    /// The one shared session.
    open class func sharedInstance() -> AVAudioSession { shared }
    private static let shared = AVAudioSession()

    /// Category, mode and options in one call (iOS 10+).
    open func setCategory(_ category: AVAudioSession.Category, mode: AVAudioSession.Mode, options: AVAudioSession.CategoryOptions = []) throws {}

    /// With a route-sharing policy (iOS 11+).
    open func setCategory(
        _ category: AVAudioSession.Category, mode: AVAudioSession.Mode, policy: AVAudioSession.RouteSharingPolicy,
        options: AVAudioSession.CategoryOptions = []
    ) throws {}

    open func setMode(_ mode: AVAudioSession.Mode) throws {}

    /// Activates or deactivates the session (iOS 6+). A CallKit call never needs it.
    open func setActive(_ active: Bool, options: AVAudioSession.SetActiveOptions = []) throws {}

    /// Sends output to the speaker, or back to the default route (iOS 6+).
    open func overrideOutputAudioPort(_ portOverride: AVAudioSession.PortOverride) throws {}

    open var category: AVAudioSession.Category { fatalError("stub") }
    open var mode: AVAudioSession.Mode { fatalError("stub") }
    open var categoryOptions: AVAudioSession.CategoryOptions { fatalError("stub") }
}

@available(macOS, unavailable)
extension AVAudioSession {
    public struct Category: RawRepresentable, Hashable, Sendable {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        public static let ambient = Category(rawValue: "ambient")
        public static let soloAmbient = Category(rawValue: "soloAmbient")
        public static let playback = Category(rawValue: "playback")
        public static let record = Category(rawValue: "record")
        public static let playAndRecord = Category(rawValue: "playAndRecord")
    }

    public struct Mode: RawRepresentable, Hashable, Sendable {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        public static let `default` = Mode(rawValue: "default")
        public static let voiceChat = Mode(rawValue: "voiceChat")
        public static let videoChat = Mode(rawValue: "videoChat")
        public static let measurement = Mode(rawValue: "measurement")
    }

    /// The stub's bit values are its own (code must never depend on them); only the names are
    /// Apple's.
    public struct CategoryOptions: OptionSet, Sendable {
        public var rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }

        public static var mixWithOthers: CategoryOptions { CategoryOptions(rawValue: 1 << 0) }
        public static var duckOthers: CategoryOptions { CategoryOptions(rawValue: 1 << 1) }
        /// Bluetooth hands-free; the iOS 26 SDK renames it `allowBluetoothHFP` (same option).
        public static var allowBluetooth: CategoryOptions { CategoryOptions(rawValue: 1 << 2) }
        #if !SWITCHBOARD_SDK_BEFORE_26
        public static var allowBluetoothHFP: CategoryOptions { CategoryOptions(rawValue: 1 << 2) }
        #endif
        public static var defaultToSpeaker: CategoryOptions { CategoryOptions(rawValue: 1 << 3) }
        public static var allowBluetoothA2DP: CategoryOptions { CategoryOptions(rawValue: 1 << 4) }
        public static var allowAirPlay: CategoryOptions { CategoryOptions(rawValue: 1 << 5) }
    }

    public enum PortOverride: Sendable {
        case none
        case speaker
    }

    public struct SetActiveOptions: OptionSet, Sendable {
        public var rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        public static var notifyOthersOnDeactivation: SetActiveOptions { SetActiveOptions(rawValue: 1 << 0) }
    }

    public enum RouteSharingPolicy: Sendable {
        case `default`, longFormAudio, independent, longFormVideo
    }
}

/// The app's audio settings that are not the session's (iOS 17+): the microphone permission.
open class AVAudioApplication: NSObject, @unchecked Sendable {
    /// Asks for permission to record (the system prompts once; later calls answer at once).
    open class func requestRecordPermission(completionHandler response: @escaping @Sendable (Bool) -> Void) {}
}
