# dtrace: the two commands a newcomer needs are `make demo` and `make test`.
# Both install missing system packages first (Debian/Ubuntu; root or sudo).

REBAR3 ?= rebar3
CARGO  ?= cargo
MIX    ?= mix

N ?= 5
SUITES ?=

.PHONY: all deps build nif dist kit check python-check test test-repeat test-kernels test-trixie test-sid demo demo-picture demo-recorder bench bench-messages bench-attach bench-always-on bench-os bench-stall figures soak clean generated check-aarch64 check-aarch64-run check-platforms

all: build

deps:
	@scripts/ensure-deps.sh

nif:
	sh native/build-nif.sh release

build: deps
	$(REBAR3) compile

# The fast check, while working: formatting, lints, the Rust unit tests
# (the module-circle test, src/layering.rs, among them), dialyzer and the
# Erlang modules' circle check, the tools' Python checks, the Elixir tests
# and the suites that need no root, test/no_root (the API's contract,
# any-term properties, providers, files, robustness; their tracer cases
# attach bpftrace or gdb as root and skip without it): no guest, nothing
# downloaded. Installs no package: run `make test` or
# scripts/ensure-deps.sh once first.
check: python-check
	@scripts/tracefs.sh
	$(CARGO) fmt --check
	escript scripts/figures.escript check
	$(CARGO) clippy --release --all-targets -- -D warnings
	$(CARGO) test --release
	MIX_ENV=test $(MIX) test --warnings-as-errors
	$(REBAR3) dialyzer
	escript scripts/module-circles.escript $${REBAR_BASE_DIR:-_build}/default/lib/dtrace/ebin
	REBAR3=$(REBAR3) sh scripts/ct.sh --dir test/no_root

# Everything on this host but the guests: make check, then what it leaves
# out (clippy of the test-hooks build, the other platforms, edoc, and the
# suites that need root and real tracers, test/root).
test: deps
	@$(MAKE) --no-print-directory check
	$(CARGO) clippy --release --all-targets --features test-hooks -- -D warnings
	sh scripts/check-platforms.sh
	$(REBAR3) edoc
	REBAR3=$(REBAR3) sh scripts/ct.sh --dir test/root

# The tools' Python (priv/python/dtrace_tools), with Debian's packages
# (setup.cfg configures all three): the lint, the types, the unit tests
# (test/python). Part of check and test.
python-check:
	flake8 priv/python test/python test/support test/loads
	mypy
	pytest -q

# The Common Test suites N times (default 5), every failure reported with
# its run and case: make test-repeat N=5 [SUITES="dtrace_vm_SUITE ..."].
test-repeat: deps
	@scripts/tracefs.sh
	$(REBAR3) compile
	N=$(N) SUITES="$(SUITES)" REBAR3=$(REBAR3) sh scripts/test-repeat.sh

# The kernels and tracers users run, in QEMU guests booting Debian 12's and
# Debian 13's kernels with their own userland, tracers and OTP
# (dtrace_kernels_SUITE), and DTrace's DOF in Debian 13's guest with
# dtprobed (dtrace_dtrace_SUITE:dof_in_guest) (scripts/guest.sh; roots
# cached in /var/cache/dtrace-guests). Needs root. The beams are built with
# the system's OTP (Debian 12's 25, the oldest: they load in both guests).
test-kernels: deps
	$(REBAR3) compile
	DTRACE_TEST_KERNELS=1 REBAR3=$(REBAR3) sh scripts/ct.sh --suite dtrace_kernels_SUITE,dtrace_dtrace_SUITE

# make test's checks and suites with a Debian release's own packages, in a
# chroot on this kernel (scripts/userland.sh says what runs; roots cached
# in /var/cache/dtrace-guests). Needs root. test-trixie: Debian 13 (OTP 27,
# Rust 1.85, bpftrace 0.23); test-sid: Debian sid (OTP 29, Elixir 1.20,
# bpftrace 0.27, LTTng 2.16, RabbitMQ 4.3). Every suite but the guests',
# or SUITES="dtrace_vm_SUITE ...".
test-trixie test-sid: test-%: deps
	@scripts/tracefs.sh
	sh scripts/userland.sh $* $(SUITES)

demo: deps
	@scripts/tracefs.sh
	$(REBAR3) compile
	sh examples/demo.sh

# The README's picture: make demo's flame graph of the slow spans
# (_build/demo/why.folded) in speedscope, headless (scripts/viewers.sh sets
# it up; root the first time).
demo-picture:
	@test -f _build/demo/why.folded || { echo "run make demo first" >&2; exit 1; }
	eval "$$(sh scripts/viewers.sh)" && "$$VIEWER_PYTHON" "$$DTRACE_VIEWER" --speedscope "$$SPEEDSCOPE_DIR" \
	    --chromium "$$CHROMIUM" --view left-heavy --size 1200x360 --screenshot docs/demo-flame-graph.png \
	    _build/demo/why.folded > /dev/null

# The flight recorder (docs/recorder.md): two nodes, a slow put caught by
# an LTTng snapshot with nobody watching, the merged report (~40 s).
demo-recorder: deps
	$(REBAR3) compile
	sh examples/recorder_demo.sh

bench: deps
	@scripts/tracefs.sh
	$(REBAR3) compile
	sh bench/run.sh

# One part of `make bench` alone, printed with its budgets, nothing written:
# bench-messages (the realistic-message rows, bench/message_bench.erl),
# bench-attach (function spans, bench/attach_bench.erl), bench-always-on
# (the flight recorder always on, bench/always_on_bench.erl), bench-os (the
# kernel's events of "why was it slow" and dtrace-sched, bench/os_bench.erl),
# bench-stall (what attaching and detaching bpftrace pauses, bench/stall_bench.erl).
bench-messages bench-attach bench-always-on bench-os bench-stall: bench-%: deps
	@scripts/tracefs.sh
	$(REBAR3) compile
	sh bench/run.sh $(subst -,_,$*)

# The figures README.md, CONTRIBUTING.md and docs/ quote, rewritten from
# BENCHMARKS.md's table after a `make bench` (make test checks they match).
figures:
	escript scripts/figures.escript write

soak: deps
	@scripts/tracefs.sh
	$(REBAR3) compile
	sh test/no_root/soak.sh

# After a change to native/dtrace_nif/probes.d: rewrite what is generated
# from the catalogue (docs/reference.md's tables, src/api/dtrace_efile.hrl, the
# efile command tables of priv/bpftrace/efile.bt, priv/dtrace/efile_drv.d and
# priv/systemtap/efile.stp); cargo test checks that they match.
generated:
	$(CARGO) run --quiet --release -p dtrace_catalogue -- generate .

# The precompiled objects for builds without Rust (README, "Install"):
# dist/lib*-vVSN-nif-NIF-TARGET.so.tar.gz for x86_64 and aarch64 Linux, and
# checksum-dtrace_nif.exs rewritten (commit it). scripts/dist.sh -o DIR
# -c FILE TARGET... for other places or one target.
dist:
	sh scripts/dist.sh

# The operators' kit (docs/operators.md, step 0): dist/dtrace-kit-VSN-TARGET.tar.gz
# and its .sha256 for x86_64 and aarch64 Linux, for hosts with nothing
# built: make dist's objects, the beams of OTP 25 (this host's) and 27 (the
# trixie-userland root: root), the tools (scripts/kit.sh says what and why).
# scripts/kit.sh -o DIR TARGET... for other places or one target.
kit:
	sh scripts/kit.sh

# Builds the NIF for aarch64 Linux and checks its notes (needs the rustup
# target aarch64-unknown-linux-gnu and Debian's gcc-aarch64-linux-gnu).
check-aarch64:
	sh scripts/check-aarch64.sh

# The aarch64 archives of make dist installed by native/precompiled.escript
# and loaded by Debian 13 arm64's OTP, under qemu-user-static
# (scripts/aarch64-run.sh; root; about 2 minutes with its root cached).
check-aarch64-run:
	sh scripts/aarch64-run.sh

# cargo check and clippy for illumos, FreeBSD and macOS (rustup targets,
# installed when missing); part of make test.
check-platforms:
	sh scripts/check-platforms.sh

clean:
	$(REBAR3) clean
	$(CARGO) clean
	rm -f priv/dtrace_nif.so
