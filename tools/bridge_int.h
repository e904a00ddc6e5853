/*
 * What agentsnet-bridge's parts share, and nothing else includes: tools/bridge.c
 * (options, environment, relay, PID 1 duties) and tools/bridge_filter.c (the
 * seccomp filters of the agent and of the bridge itself). One file per job.
 */
#ifndef AN_TOOLS_BRIDGE_INT_H
#define AN_TOOLS_BRIDGE_INT_H

#include <seccomp.h>

enum filter_kind {
	FILTER_AGENT,  /* loaded by the agent before exec; inherited by everything it runs */
	FILTER_BRIDGE, /* loaded by the bridge once the agent is forked */
};

/* ---- tools/bridge_filter.c ---- */

/* Builds the filter of <kind> into <out> (native architecture only; any other kills):
 * 0 or a negative errno from libseccomp. */
int filter_build(scmp_filter_ctx *out, enum filter_kind kind);
/* Loads <ctx>: without no_new_privs where the kernel allows it, else with; 0 or -errno. */
int filter_load(scmp_filter_ctx ctx);

#endif
