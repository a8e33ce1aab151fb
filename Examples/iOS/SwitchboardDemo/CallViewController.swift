import SwitchboardKit
import UIKit

/// One screen: who you are, a field to call someone, and the current call's buttons.
final class CallViewController: UIViewController {
    private let calls: CallController
    private let statusLabel = UILabel()
    private let calleeField = UITextField()
    private let callButton = UIButton(type: .system)
    private let hangUpButton = UIButton(type: .system)
    private let answerButton = UIButton(type: .system)
    private let declineButton = UIButton(type: .system)

    init(calls: CallController) {
        self.calls = calls
        super.init(nibName: nil, bundle: nil)
    }

    required init?(coder: NSCoder) { nil }

    override func viewDidLoad() {
        super.viewDidLoad()
        title = "Switchboard"
        view.backgroundColor = .systemBackground
        calleeField.placeholder = "User to call"
        for (button, title) in [(callButton, "Call"), (hangUpButton, "Hang up"), (answerButton, "Answer"), (declineButton, "Decline")] {
            button.setTitle(title, for: .normal)
        }
        callButton.addAction(UIAction { [weak self] _ in self?.placeCall() }, for: .touchUpInside)
        hangUpButton.addAction(UIAction { [weak self] _ in self?.calls.hangUp() }, for: .touchUpInside)
        answerButton.addAction(UIAction { [weak self] _ in self?.calls.answerInApp() }, for: .touchUpInside)
        declineButton.addAction(UIAction { [weak self] _ in self?.calls.declineInApp() }, for: .touchUpInside)
        let stack = UIStackView(arrangedSubviews: [statusLabel, calleeField, callButton, answerButton, declineButton, hangUpButton])
        stack.axis = .vertical
        stack.spacing = 12
        stack.frame = view.bounds.insetBy(dx: 24, dy: 96)
        stack.autoresizingMask = [.flexibleWidth, .flexibleHeight]
        view.addSubview(stack)
        calls.onChange = { [weak self] in self?.redraw() }
        redraw()
    }

    private func placeCall() {
        guard let callee = calleeField.text, !callee.isEmpty else { return }
        calls.call(callee)
    }

    private func redraw() {
        if let (_, update) = calls.ringingInApp {
            statusLabel.text = "\(update.displayName) is calling"
        } else {
            statusLabel.text = calls.current.map { "In a call (\($0.uuidString.prefix(8)))" } ?? calls.status
        }
        let ringing = calls.ringingInApp != nil
        answerButton.isHidden = !ringing
        declineButton.isHidden = !ringing
        hangUpButton.isHidden = calls.current == nil || ringing
        callButton.isHidden = calls.current != nil || ringing
    }
}
