#include "sb_simdjson.h"

#include <new>
#include <simdjson.h>
#include <string_view>

struct sb_signal_reader {
    simdjson::dom::parser parser;
};

sb_signal_reader *sb_signal_reader_new(void) { return new (std::nothrow) sb_signal_reader(); }

void sb_signal_reader_free(sb_signal_reader *reader) { delete reader; }

namespace {
// The value of the last member named `key`: jansson, and the byte scan that finds the
// signal's span, keep the last of repeated keys, so this reader does too.
bool last_member(simdjson::dom::object object, std::string_view key, simdjson::dom::element &found) {
    bool seen = false;
    for (auto field : object) {
        if (field.key == key) {
            found = field.value;
            seen = true;
        }
    }
    return seen;
}

bool string_of(simdjson::dom::element element, const char **text, size_t *length) {
    std::string_view value;
    if (element.get_string().get(value) != simdjson::SUCCESS) return false;
    *text = value.data();
    *length = value.size();
    return true;
}
}  // namespace

int sb_signal_reader_read(sb_signal_reader *reader, const char *text, size_t length, sb_signal_fields *fields) {
    simdjson::dom::element root;
    if (reader->parser.parse(text, length, true).get(root) != simdjson::SUCCESS) return -1;
    simdjson::dom::object object;
    if (root.get_object().get(object) != simdjson::SUCCESS) return 0;
    simdjson::dom::element type, id, data, room, to, signal;
    std::string_view typeText;
    if (!last_member(object, "type", type) || type.get_string().get(typeText) != simdjson::SUCCESS || typeText != "signal") return 0;
    if (!last_member(object, "id", id)) return 0;
    if (id.is_string()) {
        fields->id_kind = 1;
        string_of(id, &fields->id_text, &fields->id_length);
    } else if (id.is_int64()) {
        fields->id_kind = 2;
        fields->id_int = int64_t(id);
    } else {
        return 0;
    }
    simdjson::dom::object dataObject;
    if (!last_member(object, "data", data) || data.get_object().get(dataObject) != simdjson::SUCCESS) return 0;
    if (!last_member(dataObject, "room", room) || !string_of(room, &fields->room, &fields->room_length)) return 0;
    if (!last_member(dataObject, "to", to) || !string_of(to, &fields->to, &fields->to_length)) return 0;
    if (!last_member(dataObject, "signal", signal)) return 0;
    return 1;
}

int sb_node_signal_read(sb_signal_reader *reader, const char *text, size_t length, sb_node_signal_fields *fields) {
    simdjson::dom::element root;
    if (reader->parser.parse(text, length, true).get(root) != simdjson::SUCCESS) return -1;
    simdjson::dom::object object;
    if (root.get_object().get(object) != simdjson::SUCCESS) return 0;
    simdjson::dom::element k, op, from, app, room, peer, to, signal;
    std::string_view kText, opText;
    if (!last_member(object, "k", k) || k.get_string().get(kText) != simdjson::SUCCESS || kText != "tell") return 0;
    if (!last_member(object, "op", op) || op.get_string().get(opText) != simdjson::SUCCESS || opText != "sig") return 0;
    if (!last_member(object, "from", from) || !string_of(from, &fields->from, &fields->from_length)) return 0;
    if (!last_member(object, "app", app) || !string_of(app, &fields->app, &fields->app_length)) return 0;
    if (!last_member(object, "room", room) || !string_of(room, &fields->room, &fields->room_length)) return 0;
    if (!last_member(object, "peer", peer) || !string_of(peer, &fields->peer, &fields->peer_length)) return 0;
    if (!last_member(object, "to", to) || !string_of(to, &fields->to, &fields->to_length)) return 0;
    if (!last_member(object, "signal", signal)) return 0;
    return 1;
}
