// Writes to a store as fast as it can and prints what has committed, so that a test can kill -9
// this process mid-write and check that nothing committed was lost. Stops by itself after
// 60 seconds.
//   store-torture DATA_DIR          apps, each inserted in its own transaction (synchronous):
//                                   prints each API key once committed
//   store-torture DATA_DIR queued   trace entries through the store's write queue (the path of
//                                   call records, history and traces): batches of 10 queued,
//                                   then waited for; prints each batch's id once all of it is in

import Foundation
import SwitchboardServer
import SwitchboardSystem

let arguments = CommandLine.arguments
guard arguments.count == 2 || (arguments.count == 3 && arguments[2] == "queued") else {
    FileHandle.standardError.write(Data("usage: store-torture DATA_DIR [queued]\n".utf8))
    exit(2)
}
func say(_ text: String) {
    let line = Array((text + "\n").utf8)
    _ = line.withUnsafeBufferPointer { write(1, $0.baseAddress, $0.count) }
}
let store = try Store(directory: arguments[1])
let deadline = Date().addingTimeInterval(60)
var batch = 0
while Date() < deadline {
    if arguments.count == 2 {
        let app = App.make(name: "torture", bundleID: "com.example.torture")
        try store.insert(app)
        say(app.apiKey)
    } else {
        batch += 1
        let id = "\(ProcessInfo.processInfo.processIdentifier)-\(batch)"
        for entry in 0..<10 {
            store.enqueue("torture trace", statements: [
                Store.traceEntry(callID: id, user: "u\(entry)", device: "d", channel: "websocket", event: "delivered", atMillis: Int64(entry), detail: nil)
            ])
        }
        store.flush()
        say(id)
    }
}
store.close()
