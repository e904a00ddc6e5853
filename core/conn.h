/*
 * A client connection and everything done for it: reading request heads,
 * deciding, resolving, connecting upstream, relaying (splice or copy), and
 * answering refusals in-band. The conn owns its upstream socket too, so one
 * pool object is one tunnel.
 */
#ifndef AN_CORE_CONN_H
#define AN_CORE_CONN_H

#include <linux/time_types.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/http1.h"
#include "core/limits.h"
#include "core/pipepool.h"
#include "core/timer.h"
#include "core/ud.h"

struct conn_mode;
struct worker;
struct worker_listener;

/* One direction of a relay: up is sandbox -> upstream, down the reverse. */
struct relay {
	uint8_t state;
	bool eof; /* the source has sent its last byte */
	bool
	    reset; /* ... and then failed: the destination is reset, not shut, once it has it all */
	bool holds_buf;
	bool full_fill;      /* the last splice-in was large: the source is streaming */
	bool poll_out;       /* the poll in flight waits for the destination to drain */
	uint16_t bid;        /* copy path: the provided buffer being sent */
	uint32_t buf_off;    /* copy path: sent so far from the buffer */
	uint32_t buf_len;    /* copy path: bytes in the buffer */
	uint32_t pipe_bytes; /* splice path: bytes inside the pipe */
	/* c->up only: of the conn's bytes up (c->bytes_up + up.bytes), the KiB the upload
	 * detector has seen (core/watch.c, modulo 2^32); in what was padding. */
	uint32_t watched_kib;
	struct pipe_pair *pipe; /* splice path: held only while bytes move */
	uint64_t bytes;         /* relayed so far */
};

union conn_addr {
	struct sockaddr sa;
	struct sockaddr_in v4;
	struct sockaddr_in6 v6;
};

#define CONN_ADDRS_MAX 4u
/*
 * Early-data buffers after which a conn's head receive stops (head_data),
 * whatever the conn is doing, so a client that sends on while the conn
 * resolves or connects (a body sent at once) is held back by its socket, its
 * bytes left in the kernel for the mode's own receive. What the receive
 * posted before the stop landed (completions already in the ring, or waiting
 * their sandbox's turn: core/sched.h) is kept too, however many: a conn's
 * early data is a chain of the ring's buffers (ring.held_next), bounded by
 * the ring, never a reason to close.
 */
#define CONN_EARLY_STOP_AT 8u

struct conn {
	struct worker *w;
	struct conn *live_next; /* worker's list of live conns */
	struct conn *live_prev;
	struct conn *nobufs_next; /* worker's list waiting for buffers */
	/* What runs it in TUNNEL, FORWARD or TERM: chosen with the request's
	 * tier, before the connect (core/conn_int.h). */
	const struct conn_mode *mode;
	const struct conn_front *front; /* NULL: a sandbox's listener's conn */
	uint64_t id;
	uint32_t ops;     /* bit per operation kind in flight */
	uint16_t cancels; /* cancel SQEs in flight */
	uint8_t state;
	uint8_t flags;
	int32_t cfd; /* fixed slot of the client socket */
	int32_t ufd; /* fixed slot of the upstream socket, -1 when none */
	uint32_t sandbox;
	uint32_t share_key; /* what it counts against in its worker's share (core/share.h) */
	struct timer_entry timer;
	uint64_t start_ms;
	uint64_t active_ms; /* last byte moved or request seen */
	/*
	 * Head buffer: the request head, then early data after it. In TERM the
	 * agent's TLS session writes its plaintext here (requests and their
	 * bodies): the head buffer is the conn's one client-side input buffer.
	 */
	char *head;
	uint32_t head_fill;
	uint32_t head_len;  /* parsed head length, 0 until complete */
	uint32_t early_off; /* early data forwarded so far (from head_len) */
	uint16_t path_off;  /* absolute form: the path inside the head buffer */
	uint16_t path_len;
	/* Early data that arrived in provided buffers after the head (FIFO). */
	uint16_t early_first; /* the oldest buffer of the chain, valid while early_count > 0 */
	uint16_t early_last;  /* the newest */
	uint16_t early_read;  /* bytes of the oldest already passed on */
	uint16_t early_count; /* buffers in the chain */
	/* Response head from the upstream (forwarding), pooled like the head. */
	char *resp;
	uint32_t resp_fill;
	uint32_t resp_head_len;
	/* Outgoing buffer: refusal or origin-form head. */
	char *out;
	const char *out_ptr; /* what is being sent (out or a static string) */
	uint32_t out_len;
	uint32_t out_off;
	struct relay up;
	struct relay down;
	/* The request being served. */
	uint8_t tier;
	uint8_t reason;
	uint8_t addr_count;
	uint8_t addr_next;
	uint8_t host_len;
	uint16_t port;
	uint16_t status;
	uint8_t method_len;
	bool
	    upstream_reset : 1; /* the upstream holds a request cut short: upstream_close resets it */
	bool client_reset : 1;     /* the upstream reset: a TCP client is reset at the close too */
	bool upstream_aborted : 1; /* the upstream's connection ended in a reset (inject) */
	/* A TLS handshake whose duration is still to be observed (term_handshakes_timed). */
	bool agent_tls_timed : 1;
	bool upstream_tls_timed : 1;
	/* A terminated session's CONNECT took the rate tokens of its first request. */
	bool session_tokens_taken : 1;
	int32_t connect_err;
	struct snapshot *snap; /* the current request's policy, held (core/snapshot.h) */
	struct ratelimit_entry *rule_limit; /* the request's rule limits, counted in its conns */
	/* Terminated tiers (fake-response): the TLS session and the answer being written. */
	void *client_tls;        /* owned through engine.term, NULL when none */
	const void *fake;        /* the CONNECT's verdict.fake */
	const char *answer_body; /* borrowed from the snapshot */
	uint32_t answer_body_len;
	bool term_closing;      /* close_notify queued: linger once it is sent */
	bool term_close_after;  /* close once the answer is written */
	bool term_chunked;      /* discarding a chunked request body (req_chunks) */
	bool answer_keeps_conn; /* a fake answer or a 429 in clear: the next request may follow */
	uint64_t term_skip;     /* request body bytes still to discard */
	bool admitted;          /* a request passed the sandbox's conn count: not checked again */
	/* A passthrough CONNECT: the tunnel's first flight must name its host (core/tunnel.c). */
	bool tunnel_checks_name;
	/* ... and it is plain HTTP: each request is checked, up to tunnel_checked bytes
	 * of the head buffer (req_body, req_left and req_chunks frame its bodies). */
	bool tunnel_http;
	/* ... or TLS whose client flights are still read in clear: enum tunnel_tls_watch */
	uint8_t tunnel_tls_watch;
	uint32_t tunnel_checked;
	/* When the phase a deadline runs from began: a tunnel's 200 (its first flight's
	 * head_ms), an inject request's end (its response head's response_ms). */
	uint64_t phase_since_ms;
	/* Credential-inject: the session to the upstream and the rule. */
	void *upstream_tls;                  /* owned through engine.term, NULL when none */
	const struct verdict_inject *inject; /* borrowed from the snapshot */
	const char *rule;                    /* borrowed from the policy snapshot */
	const char *instruction;             /* borrowed from the policy snapshot */
	const char *upstream_local;          /* TIER_LOCAL: "host:port" to relay to, borrowed */
	/* An O_PATH descriptor the upstream's Unix address names (/proc/self/fd/N: the
	 * gateway's agent socket), held until the connect completes; -1: none. */
	int32_t connect_path_fd;
	uint32_t requests;
	uint64_t decision_id;
	uint32_t retry_after_s; /* the refusal's Retry-After, 0: the reason's default */
	bool connect_retry; /* the next address waits for the failed one's timeout to complete */
	bool peer_refused;  /* the peer is not the agent: the refusal's record names it */
	/* Absolute-form forwarding: framing of the request and response bodies. */
	uint8_t req_body;
	uint8_t resp_body;
	char method[16];
	char host[LIMITS_HOST_BYTES_MAX + 1];
	union conn_addr addrs[CONN_ADDRS_MAX];
	bool req_done;
	bool resp_done;
	bool resp_head_done;
	bool resp_started; /* inject: a byte of this final response went to the agent */
	bool keep_alive;
	bool head_method;
	bool reused_upstream; /* this request went to a kept-alive upstream */
	bool resp_keep_alive;
	uint64_t upstream_key; /* host+port hash of the open upstream (forwarding reuse) */
	struct __kernel_timespec connect_ts;
	int nodelay;
	union {
		/* Who connected to a sandbox socket whose agent's uid is known (SO_PEERCRED,
		 * read once after accept, before the head: conn_on_accept); read no more
		 * once the head is, unless refused (then nothing connects upstream). */
		struct {
			int32_t pid;
			uint32_t uid;
			uint32_t gid;
		} peer;
		/* For the metrics, once the head is read, each timer_now_us's low 32 bits
		 * (what they time lasts at most an hour, under their 71 minutes' wrap): */
		struct {
			uint32_t connect_started_us;      /* an upstream connect's start */
			uint32_t agent_tls_started_us;    /* term_start: the agent's handshake */
			uint32_t upstream_tls_started_us; /* the inject upstream's ClientHello */
		};
	};
	uint64_t req_left;
	uint64_t resp_left;
	struct http1_chunked req_chunks;
	struct http1_chunked resp_chunks;
	uint64_t bytes_up;
	uint64_t bytes_down;
	bool client_http10; /* the request was HTTP/1.0: a kept connection says so */
	/* The ingress gateway: a conn accepted on the public listener. Its
	 * sandbox (c->sandbox, per request) comes from the path or the Host; the
	 * id is a view into the head buffer, so it costs a conn nothing to keep. */
	bool ingress;
	bool ingress_tls; /* the public listener's TLS: decrypts for the internal socket */
	/*
	 * What one mode alone keeps: a conn is the inject tier's (a sandbox's,
	 * after its CONNECT) or the gateway's (from its accept, its TLS front's
	 * included) for its whole life, never both, so the two share their bytes.
	 * The other modes touch neither; both start zeroed (pool_take).
	 */
	union {
		struct { /* the credential-inject exchange under way (core/inject.c) */
			uint8_t inject_phase; /* enum inject_phase (core/inject.c) */
			bool upstream_dead;   /* its TLS failed or it closed: no more requests */
			uint8_t
			    upstream_refusal; /* then the answer to the next request (enum reason) */
			bool upgraded;        /* a 101: both ways are raw bytes from now on */
			uint8_t
			    resp_refusal; /* enum reason: the response is refused (a redirect, a bad head) */
			bool resp_holding;   /* a tail is held back and the hold's timer is armed */
			bool resp_hold_over; /* the hold's time is up: the tail goes as it is */
			uint32_t resp_off;   /* response bytes relayed to the agent */
			uint32_t resp_scan;  /* response bytes whose framing is accounted for */
			uint64_t term_req_bytes;  /* this request's body bytes sent upstream */
			uint64_t term_resp_bytes; /* this response's body bytes for the agent */
			/* the body's framing state at resp_off, and where the body begins in resp */
			struct http1_chunked resp_chunks_sent;
			uint32_t resp_body_at;
		};
		struct { /* the ingress gateway's (core/gateway.c) */
			bool
			    ingress_proxied; /* came in on the internal socket: a PROXY v2 header first */
			bool ingress_proxy_done; /* ... which was read */
			bool
			    ingress_shut_up; /* the TLS relay shut the internal socket's write side */
			bool ingress_upgrade; /* the request asks to switch protocols */
			bool
			    ingress_record; /* a request is under way: its record is still to be written */
			bool ingress_counted; /* ... and counts in its sandbox's ingress_open */
			bool
			    ingress_origin; /* routed by Host to a sandbox's own origin, not by path */
			uint8_t ingress_id_len;  /* 0: not routed (yet) */
			uint16_t ingress_id_off; /* in the head buffer */
			union conn_addr client;  /* the public client's address */
		};
	};
} __attribute__((aligned(16)));

/* Handles a listener's accept completion (<res> is the new fixed slot or -errno). */
void conn_on_accept(struct worker_listener *l, int res, uint32_t cqe_flags);
/* Handles the completion of operation <op> of <c>. */
void conn_on_cqe(struct conn *c, uint32_t op, int res, uint32_t cqe_flags);
/*
 * Readies completion <op> of <c> (result <res>, flags *<cqe_flags>) to wait
 * for a later loop turn (core/sched.c). A head receive's bytes go into the
 * conn's head buffer now, where its handler would put them, and its provided
 * buffer back to the ring: a flood's buffers must not wait in the worker's
 * FIFO while every sandbox receives from that ring. *<cqe_flags> then carries
 * CONN_CQE_F_TAKEN, and conn_on_cqe only parses. Any other completion waits
 * as it is. Worker thread; <c> is live (the completion is outstanding).
 */
void conn_cqe_defer(struct conn *c, uint32_t op, int res, uint32_t *cqe_flags);
/* A deferred head receive's bytes are in the head buffer: no buffer id, so no F_BUFFER. */
#define CONN_CQE_F_TAKEN (1u << 31)
/* Handles the expiry of <c>'s timer. */
void conn_on_timer(struct conn *c);
/* Re-arms the receive that ran out of provided buffers. */
void conn_on_buffers(struct conn *c);
/* Aborts <c> (daemon stopping): closes both sides; freed when its ops are done. */
void conn_abort(struct conn *c);
/*
 * A drain began (engine_drain; c->w->draining is set): <c>, waiting for a
 * request that has not begun, is closed once quiet LIMITS_DRAIN_IDLE_MS; a
 * request under way goes on (the next is answered as drain_answer says).
 */
void conn_drain(struct conn *c);
/* How long <c> waits for its next request: daemon.timeouts.idle_ms, or the drain's quiet time. */
uint32_t conn_next_request_ms(const struct conn *c);
/* Upper bound of the op codes conn_on_cqe takes; user_data ops above it are the worker's. */
#define CONN_OP_COUNT UD_OP_CONN_END

#endif /* AN_CORE_CONN_H */
