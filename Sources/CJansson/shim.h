#include <jansson.h>

// json_typeof is a macro.
static inline json_type sb_json_typeof(const json_t *value) { return json_typeof(value); }
