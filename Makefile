# Switchboard: the two commands.
#   make run    build (release) and start the server on 127.0.0.1:$(PORT), data in ./data
#   make test   install what the tests need, build, and run every test
PORT ?= 8080
HOST ?= 127.0.0.1
SWIFT ?= swift
VENV := .build/venv

.PHONY: run test build deps test-deps autobahn interop typecheck-apple bench fuzz test-sanitize soak cluster clean

run: deps
	$(SWIFT) build -c release --product switchboard
	HOST=$(HOST) PORT=$(PORT) scripts/run.sh .build/release/switchboard

test: test-deps
	$(SWIFT) build --build-tests
	POSTGRES_MIN_STORES=28 scripts/test-count.sh swift scripts/with-postgres.sh $(SWIFT) test
	scripts/fuzz.sh replay
	scripts/autobahn.sh .build/debug/switchboard $(VENV)
	scripts/test-count.sh interop scripts/interop.sh .build/debug/switchboard $(VENV)
	scripts/typecheck-apple.sh

# A cluster on loopback: PostgreSQL, Redis, three nodes and HAProxy on 127.0.0.1:$(PORT). Ctrl-C stops it.
cluster: test-deps
	$(SWIFT) build -c release --product switchboard
	PORT=$(PORT) scripts/with-postgres.sh scripts/cluster.sh .build/release/switchboard

build: deps
	$(SWIFT) build

deps:
	@scripts/deps.sh run

test-deps:
	@scripts/deps.sh test
	@scripts/venv.sh $(VENV)

autobahn: test-deps
	$(SWIFT) build --product switchboard
	scripts/autobahn.sh .build/debug/switchboard $(VENV)

interop: test-deps
	$(SWIFT) build --product switchboard
	scripts/interop.sh .build/debug/switchboard $(VENV)

# SwitchboardKit and Examples/iOS type-checked against the stubs of Apple's frameworks
# (Tests/AppleStubs): iOS, strict delegate conformance, and a macOS build.
typecheck-apple:
	scripts/typecheck-apple.sh

bench: test-deps
	POSTGRES_DURABLE=1 VENV=$(VENV) scripts/with-postgres.sh scripts/bench.sh

# libFuzzer on every parser of outside input, FUZZ_SECONDS (default 60) per target.
fuzz: deps
	scripts/fuzz.sh run

# Ten minutes (SOAK_SECONDS) of idle connections, churn, rooms, relay and ringing on one server.
soak: deps
	scripts/soak.sh

# The Swift tests under AddressSanitizer, then ThreadSanitizer (separate build directories).
# Leak reports at exit are off: objects alive until a process ends (its event loop, the test
# harness's own) are not leaks, and a report written to a pipe nobody reads yet blocks the child.
# Deadline checks in the tests are stretched (SWITCHBOARD_TEST_SLOWDOWN) for the sanitizers' cost.
test-sanitize: test-deps
	ASAN_OPTIONS=detect_leaks=0 SWITCHBOARD_TEST_SLOWDOWN=5 scripts/with-postgres.sh $(SWIFT) test --sanitize=address --scratch-path .build/asan
	SWITCHBOARD_TEST_SLOWDOWN=10 scripts/with-postgres.sh $(SWIFT) test --sanitize=thread --scratch-path .build/tsan

clean:
	rm -rf .build
