/*
 * The node's sandboxes at a glance: `agentsnet sandbox ls` (one table) and
 * `agentsnet top` (the table refreshed, busiest first), both from the daemon's
 * `sandbox stats` (tools/agentsnet/ctl.h): each sandbox's owner, profile,
 * uptime, open connections, decisions, refusals and bytes.
 */
#ifndef AN_TOOLS_AGENTSNET_TOP_H
#define AN_TOOLS_AGENTSNET_TOP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tools/agentsnet/ctl.h"

/*
 * Prints the answer <r> to `sandbox stats` as a table on <out>, in the
 * daemon's order. Returns 0, or -EPROTO for an answer that is not one (a
 * count that does not match, a malformed line).
 */
int top_table(const struct ctl_reply *r, FILE *out);

/*
 * `agentsnet top`: asks the daemon at <control_path> for `sandbox stats`
 * every <interval_ms> and prints the sandboxes busiest first (decisions a
 * second, then bytes a second, over the last interval), the screen cleared
 * before each frame when <out> is a terminal; with <once>, one frame after
 * one interval. Returns a CTL_EXIT_* code when the daemon cannot be asked or
 * answers wrong; runs until SIGINT or SIGTERM otherwise (CTL_EXIT_OK).
 */
int top_run(const char *control_path, uint32_t interval_ms, bool once, FILE *out);

#endif /* AN_TOOLS_AGENTSNET_TOP_H */
