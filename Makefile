# dtrace: the two commands a newcomer needs are `make demo` and `make test`.
# Both install missing system packages first (Debian/Ubuntu; root or sudo).

REBAR3 ?= rebar3
CARGO  ?= cargo
MIX    ?= mix

.PHONY: all deps build nif test demo demo-recorder bench soak clean readme-probes check-aarch64

all: build

deps:
	@scripts/ensure-deps.sh

nif:
	sh native/build-nif.sh release

build: deps
	$(REBAR3) compile

test: deps
	@scripts/tracefs.sh
	$(CARGO) test --release
	$(CARGO) clippy --release --all-targets -- -D warnings
	$(CARGO) clippy --release --all-targets --features test-hooks -- -D warnings
	$(CARGO) clippy --release --all-targets --features sites-only -- -D warnings
	MIX_ENV=test $(MIX) test
	$(REBAR3) edoc
	$(REBAR3) dialyzer
	REBAR3=$(REBAR3) sh scripts/ct.sh

demo: deps
	@scripts/tracefs.sh
	$(REBAR3) compile
	sh examples/demo.sh

# The flight recorder (docs/recorder.md): two nodes, a slow put caught by
# an LTTng snapshot with nobody watching, the merged report (~40 s).
demo-recorder: deps
	$(REBAR3) compile
	sh examples/recorder_demo.sh

bench: deps
	@scripts/tracefs.sh
	$(REBAR3) compile
	sh bench/run.sh

soak: deps
	@scripts/tracefs.sh
	$(REBAR3) compile
	sh test/soak.sh

# After a change to native/dtrace_nif/probes.d: rewrite the README's probe
# and register tables from the catalogue (cargo test checks they match).
readme-probes:
	$(CARGO) run --quiet --release -p dtrace_catalogue -- readme README.md

# Builds the NIF for aarch64 Linux and checks its notes (needs the rustup
# target aarch64-unknown-linux-gnu and Debian's gcc-aarch64-linux-gnu).
check-aarch64:
	sh scripts/check-aarch64.sh

clean:
	$(REBAR3) clean
	$(CARGO) clean
	rm -f priv/dtrace_nif.so
