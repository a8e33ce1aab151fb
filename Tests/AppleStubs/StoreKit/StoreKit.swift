// Stub of StoreKit, declarations only, written by hand from
// developer.apple.com/documentation/storekit/storefront. See ../README.md.

@_exported import Foundation

/// The App Store storefront of the device's account (iOS 15+).
public struct Storefront: Sendable {
    /// The storefront's country or region, as an ISO 3166-1 alpha-3 code (storefront/countrycode).
    public let countryCode: String
    /// Apple's identifier of the storefront (storefront/id).
    public let id: String

    /// The storefront now, read asynchronously; nil when there is none (storefront/current).
    public static var current: Storefront? {
        get async { nil }
    }
}
