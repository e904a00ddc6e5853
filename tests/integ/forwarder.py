#!/usr/bin/env python3
"""The minimal in-sandbox forwarder of the integration suite.

Listens on a TCP address inside the sandbox's network namespace and relays
every accepted connection, byte for byte and in both directions, to the
sandbox's egress Unix socket; an end-of-stream on one side is passed on as a
half-close (shutdown of the write side) on the other, so request bodies that
end with the client's FIN still work. Unix pathname sockets are found through
the file system, so the socket the daemon created in the host namespace is
reachable from here although this process sees only `lo`.

This stands in for agentsnet-bridge until that exists. With --stats FILE it
rewrites FILE with the number of accepted connections after each accept, so a
test can prove that a client reused one connection.

    forwarder.py --listen 127.0.0.1:8080 --unix /path/egress.sock [--stats FILE]

Prints "forwarder: ready" to stderr once listening; stops on SIGTERM/SIGINT.
"""

import argparse
import asyncio
import os
import signal
import sys

CHUNK_BYTES = 256 * 1024


class Forwarder:
    def __init__(self, unix_path, stats_path):
        self.unix_path = unix_path
        self.stats_path = stats_path
        self.accepted = 0
        self.tasks = set()

    def write_stats(self):
        if self.stats_path is None:
            return
        tmp = self.stats_path + ".tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write("%d\n" % self.accepted)
        os.replace(tmp, self.stats_path)

    async def pump(self, reader, writer):
        """Copies reader to writer until EOF, then half-closes writer."""
        try:
            while True:
                data = await reader.read(CHUNK_BYTES)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            # A reset on one side ends both directions: close the other side
            # too, so the peer sees the connection end instead of a hang.
            writer.transport.abort()

    async def serve(self, c_reader, c_writer):
        self.accepted += 1
        self.write_stats()
        task = asyncio.current_task()
        self.tasks.add(task)
        try:
            try:
                u_reader, u_writer = await asyncio.open_unix_connection(self.unix_path)
            except OSError as e:
                print("forwarder: connect %s: %s" % (self.unix_path, e), file=sys.stderr)
                c_writer.transport.abort()
                return
            await asyncio.gather(
                self.pump(c_reader, u_writer), self.pump(u_reader, c_writer)
            )
            u_writer.close()
            c_writer.close()
        finally:
            self.tasks.discard(task)


async def main_async(args):
    host, port = args.listen.rsplit(":", 1)
    fwd = Forwarder(args.unix, args.stats)
    fwd.write_stats()
    server = await asyncio.start_server(fwd.serve, host, int(port), reuse_address=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("forwarder: ready on %s -> %s" % (args.listen, args.unix), file=sys.stderr, flush=True)
    await stop.wait()
    server.close()
    for task in list(fwd.tasks):
        task.cancel()
    await asyncio.gather(*fwd.tasks, return_exceptions=True)
    print("forwarder: stopped after %d connections" % fwd.accepted, file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", required=True, help="host:port to listen on")
    ap.add_argument("--unix", required=True, help="egress Unix socket to forward to")
    ap.add_argument("--stats", help="file rewritten with the accepted-connection count")
    asyncio.run(main_async(ap.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
