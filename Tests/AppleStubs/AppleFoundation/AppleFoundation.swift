// What Foundation has on Apple's systems and Linux's Foundation lacks, for the stubs: the
// URL loading system (FoundationNetworking on Linux, re-exported here) and NSUserActivity
// (declared here, the part the SDK and the example use, written by hand from
// developer.apple.com/documentation/foundation/nsuseractivity). The UIKit and Intents stubs
// re-export this module, as Apple's frameworks re-export Foundation.

@_exported import Foundation
@_exported import FoundationNetworking

/// An activity the system hands to the app (a call-back from Recents, a Handoff...).
open class NSUserActivity: NSObject {
    public init(activityType: String) {}
    open var activityType: String { "" }
}
