%%% The sizes of the measurements of `make bench`, shared by dtrace_bench and
%%% dtrace_bench_report (which writes them into BENCHMARKS.md).
-define(ROUNDS, 7).
-define(N_DISABLED, 2000000).
-define(N_ENABLED, 200000).
-define(N_THROUGHPUT, 10000000).
