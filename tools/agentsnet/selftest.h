/*
 * `agentsnet selftest`: escape probes in a real sandbox, on the operator's
 * own host. It starts `agentsnet run` (this same binary) with the static probe
 * executable (agentsnet-probe, bound at SANDBOX_PROBE_PATH) as the agent,
 * after laying out on the host what an agent must not reach (a TCP listener,
 * abstract and pathname Unix sockets, marker files in the world-writable
 * directories, a SysV shared memory segment, a key in the session keyring,
 * a second registered sandbox, a pty standing for the operator's terminal),
 * then checks from the host what the probes could not see from inside (bytes
 * typed into that terminal, files that appeared on the host). It prints one
 * line per probe, "<probe> closed: <how>" or "<probe> OPEN: <what got
 * through>", and a summary.
 */
#ifndef AN_TOOLS_AGENTSNET_SELFTEST_H
#define AN_TOOLS_AGENTSNET_SELFTEST_H

/* Exit codes: 0 every probe closed, 1 one or more OPEN, 2 usage, 125 could not run. */
#define SELFTEST_EXIT_OPEN   1
#define SELFTEST_EXIT_FAILED 125

/*
 * `agentsnet selftest [--socket-dir DIR] [--bridge PATH] [--probe PATH] [--user USER] [-v]`:
 * <argv>[0] is "selftest". Returns the process's exit status.
 */
int selftest_main(int argc, char **argv);

#endif /* AN_TOOLS_AGENTSNET_SELFTEST_H */
