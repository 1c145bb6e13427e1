# dtrace: the two commands a newcomer needs are `make demo` and `make test`.
# Both install missing system packages first (Debian/Ubuntu; root or sudo).

REBAR3 ?= rebar3
CARGO  ?= cargo
MIX    ?= mix

.PHONY: all deps build nif test demo bench soak clean

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
	$(CARGO) clippy --release --all-targets --features test-panic -- -D warnings
	MIX_ENV=test $(MIX) test
	$(REBAR3) edoc
	$(REBAR3) dialyzer
	REBAR3=$(REBAR3) sh scripts/ct.sh

demo: deps
	@scripts/tracefs.sh
	$(REBAR3) compile
	sh examples/demo.sh

bench: deps
	@scripts/tracefs.sh
	$(REBAR3) compile
	sh bench/run.sh

soak: deps
	@scripts/tracefs.sh
	$(REBAR3) compile
	sh test/soak.sh

clean:
	$(REBAR3) clean
	$(CARGO) clean
	rm -f priv/dtrace_nif.so
