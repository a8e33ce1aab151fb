// Writes apps to a store as fast as it can, printing each API key once its transaction has
// committed, so a test can kill -9 this process mid-write and check nothing committed was lost.
// Stops by itself after 60 seconds.

import Foundation
import SwitchboardServer

guard CommandLine.arguments.count == 2 else {
    FileHandle.standardError.write(Data("usage: store-torture DATA_DIR\n".utf8))
    exit(2)
}
let store = try Store(directory: CommandLine.arguments[1])
let deadline = Date().addingTimeInterval(60)
while Date() < deadline {
    let app = App.make(name: "torture", bundleID: "com.example.torture")
    try store.insert(app)
    let line = Array((app.apiKey + "\n").utf8)
    _ = line.withUnsafeBufferPointer { write(1, $0.baseAddress, $0.count) }
}
store.close()
