/*
 * `agentsnet check`: the decision agentsnetd would make for one URL, from the
 * same compiled policy code, without a daemon.
 */
#ifndef AN_TOOLS_AGENTSNET_CHECK_H
#define AN_TOOLS_AGENTSNET_CHECK_H

/* Exit codes of `agentsnet check`. */
#define CHECK_EXIT_ALLOW  0
#define CHECK_EXIT_DENY   1
#define CHECK_EXIT_CANNOT 2 /* usage, an unreadable or invalid policy, a bad URL */

/*
 * Runs `agentsnet check [--config FILE] [--sandbox ID | --profile NAME]
 * [--socket-dir DIR] [--resolve] URL [METHOD]`; <argv>[0] is "check";
 * <socket_dir> is the directory without --socket-dir. Prints the decision
 * to stdout, problems to stderr. Returns a CHECK_EXIT_* code.
 */
int check_main(int argc, char **argv, const char *socket_dir);

#endif /* AN_TOOLS_AGENTSNET_CHECK_H */
