/*
 * The probes of provider dtrace_floor (floor_tp.h), linked into
 * floor_lttng_driver: LTTNG_UST_TRACEPOINT_CREATE_PROBES makes the header
 * generate the probe callbacks and register the provider from a
 * constructor. The library keeps its probes in a separate package it
 * dlopens; either way an event goes through the same callback, so the
 * floor links them in directly (one executable, no dlopen).
 */
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#include "floor_tp.h"
