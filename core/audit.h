/*
 * The audit trail: one JSON object per line, one record per decision and one
 * per closed connection (docs/design.md section 5).
 *
 * Each worker owns one single-producer/single-consumer ring of fixed-size
 * records; a writer thread drains every ring, formats JSON off the data path
 * and appends to the file. A worker never blocks on the writer: when its ring
 * is full the record is dropped and counted, and the writer itself audits the
 * drop count. Secrets never enter a record: the fields are all there is.
 */
#ifndef AN_CORE_AUDIT_H
#define AN_CORE_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/reason.h"

enum audit_kind {
	AUDIT_DECISION = 0, /* "event":"decision" */
	AUDIT_CLOSE,        /* "event":"close" */
	AUDIT_NOTICE,       /* "event":"notice": daemon-level (start, stop, config) */
	AUDIT_INGRESS,      /* "event":"ingress": one public request to a sandbox */
	AUDIT_ALERT,        /* "event":"alert": a detector fired (core/watch.c); fields below */
	AUDIT__KINDS,
};

/*
 * An alert record reuses the fields: rule is the detector, method the action
 * ("none", "quarantine"), bytes_up the count, bytes_down the baseline,
 * duration_ms the window in seconds, host the request's host, addr the
 * suffix, path the names sampled (each ended by a newline), detail a sentence.
 */
/* Fixed-size record; strings are NUL-terminated and truncated to fit. */
struct audit_record {
	uint64_t ts_us;    /* CLOCK_REALTIME, microseconds; set by audit_commit */
	uint64_t id;       /* from audit_next_id */
	uint64_t conn_id;  /* the client connection */
	uint64_t bytes_up; /* sandbox -> upstream (close records) */
	uint64_t bytes_down;
	uint32_t duration_ms; /* close records: connection lifetime */
	uint16_t port;
	uint16_t status; /* HTTP status answered, 0 when none (tunnel close) */
	uint8_t kind;    /* enum audit_kind */
	uint8_t tier;    /* enum tier */
	uint8_t reason;  /* enum reason */
	bool allowed;
	char sandbox[64];
	char method[16];
	char host[256];
	char rule[96];
	char path[256];
	char addr
	    [64]; /* resolved upstream address, "ip:port" or "[ip6]:port"; ingress: the client's */
	char detail[128]; /* free text for notices and errors (never a secret) */
};

struct audit;      /* the writer: opaque */
struct audit_ring; /* one per producer thread: opaque */

/*
 * Opens <path> for appending ("-" is standard output), creates <rings>
 * producer rings of LIMITS_AUDIT_RING_RECORDS records, and starts the writer
 * thread. Returns 0 and *<out> (owned), or -errno (the file could not be
 * opened: -EACCES, -ENOENT, ...; -ENOMEM).
 */
int audit_open(const char *path, uint32_t rings, struct audit **out);

/* Ring <index> (< rings), borrowed; to be used by exactly one thread. */
struct audit_ring *audit_ring_get(struct audit *a, uint32_t index);

/* A record id unique within this daemon run, with the ring in its top bits. */
uint64_t audit_next_id(struct audit_ring *r);

/*
 * Formats <id> as the string agents and operators see ("<boot>-<hex id>"),
 * into <out> of at least AUDIT_ID_BYTES. Returns the length.
 */
#define AUDIT_ID_BYTES 40
int audit_format_id(const struct audit *a, uint64_t id, char *out);

/*
 * Returns the next free slot of <r>, zeroed, or NULL when the ring is full
 * (the drop is counted). Must be followed by audit_commit before the next
 * claim. Never blocks. Producer thread only.
 */
struct audit_record *audit_claim(struct audit_ring *r);

/* Stamps <rec> with the time and publishes it to the writer. Producer only. */
void audit_commit(struct audit_ring *r, struct audit_record *rec);

/* Copies the string <s>/<len> into the fixed field <dst>/<cap>, truncating. */
void audit_copy(char *dst, size_t cap, const char *s, size_t len);

/* Records dropped so far, over all rings. Any thread. */
uint64_t audit_dropped(const struct audit *a);
/* Records written so far. Any thread. */
uint64_t audit_written(const struct audit *a);
/* Records formatted but lost in a failed write (a full disk), so far. Any thread. */
uint64_t audit_lost(const struct audit *a);
/*
 * Whether the last write to the file failed and none has succeeded since
 * (the records of those writes are lost; an "audit_gap" notice ends the gap).
 * A relaxed load: cheap enough for every request. NULL: false. Any thread.
 */
bool audit_failing(const struct audit *a);

/*
 * Reopens the audit file by its path, for a rotator that moved it away: the
 * writer finishes the write under way on the old file and goes on in a new
 * one, which begins with an "audit_reopened" notice; no record is lost or in
 * both. Waits up to <timeout_ms> for the writer. Returns 0; -EINVAL when the
 * audit goes to standard output; -ETIMEDOUT; or the -errno of the open, the
 * old file kept. Any thread but the writer's.
 */
int audit_reopen(struct audit *a, uint32_t timeout_ms);

/* Whether <a> writes to a file by its path, which audit_reopen can reopen (not standard output). */
bool audit_reopenable(const struct audit *a);

/*
 * Drains every ring, writes a final notice with the drop count, stops the
 * writer and releases everything. Producers must have stopped. NULL is fine.
 */
void audit_close(struct audit *a);

#endif /* AN_CORE_AUDIT_H */
