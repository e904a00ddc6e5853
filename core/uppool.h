/*
 * A worker's pool of idle upstream TLS connections of the credential-inject
 * tier: when an agent's connection ends between exchanges, its verified
 * session to the upstream is parked here, and the next agent connection of
 * this worker to the same upstream, under the same verification and the
 * same secret, takes it instead of connecting and handshaking again.
 *
 * A parked connection keeps a poll armed: if the upstream speaks or closes
 * while parked (an idle timeout of its own, say), the entry is dropped at
 * once, so what is taken is alive but for a race the conn handles as any
 * upstream that fails before answering. Entries also expire after
 * UPPOOL_IDLE_MS. Worker thread only; no locks.
 */
#ifndef AN_CORE_UPPOOL_H
#define AN_CORE_UPPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/limits.h"
#include "core/ud.h"

struct ring;
struct term_ops;

/* The user_data op of a parked entry's poll (core/ud.h), beside worker.h's. */
#define UPPOOL_OP UD_OP_UPPOOL

/* Parked connections a worker keeps at most, and how long one stays parked. */
#define UPPOOL_ENTRIES 64u
#define UPPOOL_IDLE_MS 30000u

/* What a parked connection may be reused for: all of it must match. */
struct uppool_key {
	const char *host; /* as the rule's upstream was connected and verified */
	size_t host_len;
	uint16_t port;
	const char *ca_file; /* the rule's upstream_ca, NULL: the system roots */
	const char *secret;  /* the credential its requests carried */
	size_t secret_len;
};

enum uppool_state {
	UPPOOL_FREE = 0,
	UPPOOL_PARKED,  /* idle, its poll armed */
	UPPOOL_LEAVING, /* taken, dropped or expired: waiting for its poll's last completion */
};

struct uppool_entry {
	uint8_t state;       /* enum uppool_state */
	bool close_on_leave; /* LEAVING because dropped: the slot and session go too */
	uint16_t port;
	uint8_t host_len;
	char host[LIMITS_HOST_BYTES_MAX + 1];
	uint64_t ca_hash;             /* XXH3 of the CA path ("" for the system roots) */
	uint64_t secret_hash;         /* XXH3 of the secret: the secret itself is not copied */
	int32_t fd;                   /* the fixed slot */
	void *session;                /* through term_ops */
	struct sockaddr_storage addr; /* where it is connected */
	uint64_t parked_ms;
} __attribute__((aligned(16)));

struct uppool {
	struct ring *ring;           /* borrowed: the worker's */
	const struct term_ops *term; /* borrowed: engine.term */
	struct uppool_entry entries[UPPOOL_ENTRIES];
	uint32_t parked;  /* entries PARKED */
	uint32_t leaving; /* entries LEAVING: polls still in flight */
	uint64_t reused;  /* takes that found one, for the worker's stop line */
};

/* Sets <p> up empty over <ring> and <term>. */
void uppool_init(struct uppool *p, struct ring *ring, const struct term_ops *term);

/*
 * Parks connected fixed slot <fd> with idle session <session> under <k>
 * (connected to <addr>) at <now_ms>. True when the pool took both; false
 * when it is full (the caller closes them as before).
 */
bool uppool_park(struct uppool *p, const struct uppool_key *k, const struct sockaddr *addr,
		 socklen_t addr_len, int32_t fd, void *session, uint64_t now_ms);

/*
 * Takes a parked connection for <k>: true with *<fd>, *<session> and
 * *<addr> (the caller's from now on), false when none is parked.
 */
bool uppool_take(struct uppool *p, const struct uppool_key *k, int32_t *fd, void **session,
		 struct sockaddr_storage *addr);

/* Handles the completion <res> of parked entry <e>'s poll (the worker's dispatch). */
void uppool_on_cqe(struct uppool *p, struct uppool_entry *e, int res);

/* Drops every entry parked for UPPOOL_IDLE_MS or longer at <now_ms>. */
void uppool_expire(struct uppool *p, uint64_t now_ms);

/* Drops every parked entry (the worker is stopping). */
void uppool_drain(struct uppool *p);

/* True when no poll of the pool is in flight (a stopping worker waits for it). */
bool uppool_quiet(const struct uppool *p);

#endif /* AN_CORE_UPPOOL_H */
