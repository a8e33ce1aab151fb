# Switchboard: the two commands.
#   make run    build (release) and start the server on 127.0.0.1:$(PORT), data in ./data
#   make test   install what the tests need, build, and run every test
PORT ?= 8080
HOST ?= 127.0.0.1
SWIFT ?= swift
VENV := .build/venv

.PHONY: run test build deps test-deps autobahn interop bench clean

run: deps
	$(SWIFT) build -c release --product switchboard
	HOST=$(HOST) PORT=$(PORT) scripts/run.sh .build/release/switchboard

test: test-deps
	$(SWIFT) build --build-tests
	$(SWIFT) test
	scripts/autobahn.sh .build/debug/switchboard $(VENV)
	scripts/interop.sh .build/debug/switchboard $(VENV)
	$(SWIFT) build --target SwitchboardKit --scratch-path .build/typecheck -Xswiftc -DSWITCHBOARD_TYPECHECK_URLSESSION

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

bench: test-deps
	VENV=$(VENV) scripts/bench.sh

clean:
	rm -rf .build
