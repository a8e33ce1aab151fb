// Stub of the Intents framework (SiriKit), declarations only, written by hand from
// developer.apple.com/documentation/intents (INStartCallIntent, INPerson, INPersonHandle,
// INCallCapability, INInteraction) and foundation/nsuseractivity/interaction. See ../README.md.

@_exported import AppleFoundation
@_exported import Foundation

open class INIntent: NSObject {}

/// iOS 13+: start a call (a call-back from Recents or Contacts, Siri).
open class INStartCallIntent: INIntent {
    open var contacts: [INPerson]? { nil }
    open var callCapability: INCallCapability { .unknown }
}

public enum INCallCapability: Int, Sendable {
    case unknown = 0, audioCall = 1, videoCall = 2
}

open class INPerson: NSObject {
    open var personHandle: INPersonHandle? { nil }
}

public enum INPersonHandleType: Int, Sendable {
    case unknown = 0, emailAddress = 1, phoneNumber = 2
}

open class INPersonHandle: NSObject {
    public init(value: String?, type: INPersonHandleType) {}
    open var value: String? { nil }
    open var type: INPersonHandleType { .unknown }
}

open class INInteraction: NSObject {
    open var intent: INIntent { fatalError("stub") }
}

/// Foundation declares it on Apple's systems; its type comes from Intents.
extension NSUserActivity {
    public var interaction: INInteraction? { nil }
}
