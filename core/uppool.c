/*
 * The worker's pool of idle inject-tier upstreams (core/uppool.h).
 *
 * A fixed array, scanned whole: it holds UPPOOL_ENTRIES, and a scan of 64
 * entries costs less than one handshake's first flight. An entry is matched
 * on host, port and the hashes of the CA path and of the secret, so a
 * connection verified against other roots, or one whose requests carried
 * another sandbox's credential, is never handed out.
 *
 * Leaving the pool takes two steps because the poll owns a reference to the
 * socket until its completion: taking (or dropping) an entry cancels the
 * poll and marks it LEAVING, and only that poll's last completion frees the
 * entry. A dropped entry closes its slot and frees its session then, when
 * nothing of ours can still touch either.
 */
#include "core/uppool.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <xxhash.h>

#include "core/an.h"
#include "core/compat.h"
#include "core/ring.h"
#include "core/term.h"
#include "core/ud.h"

void uppool_init(struct uppool *p, struct ring *ring, const struct term_ops *term)
{
	AN_ASSERT(p != NULL);
	AN_ASSERT(ring != NULL);
	memset(p, 0, sizeof(*p));
	p->ring = ring;
	p->term = term;
}

static uint64_t text_hash(const char *s, size_t len)
{
	return XXH3_64bits(s != NULL ? s : "", s != NULL ? len : 0);
}

static bool entry_matches(const struct uppool_entry *e, const struct uppool_key *k)
{
	return e->state == UPPOOL_PARKED && e->port == k->port && e->host_len == k->host_len &&
	       memcmp(e->host, k->host, k->host_len) == 0 &&
	       e->ca_hash == text_hash(k->ca_file, k->ca_file ? strlen(k->ca_file) : 0) &&
	       e->secret_hash == text_hash(k->secret, k->secret_len);
}

/* Cancels <e>'s poll; its last completion finishes the leave (uppool_on_cqe). */
static void entry_leave(struct uppool *p, struct uppool_entry *e, bool close)
{
	AN_ASSERT(e->state == UPPOOL_PARKED);
	AN_ASSERT(p->parked > 0);
	e->state = UPPOOL_LEAVING;
	e->close_on_leave = close;
	p->parked--;
	p->leaving++;
	struct io_uring_sqe *sqe = ring_sqe(p->ring);
	io_uring_prep_cancel64(sqe, ud_encode(e, UPPOOL_OP), 0);
	io_uring_sqe_set_data64(sqe, 0);
}

bool uppool_park(struct uppool *p, const struct uppool_key *k, const struct sockaddr *addr,
		 socklen_t addr_len, int32_t fd, void *session, uint64_t now_ms)
{
	AN_ASSERT(fd >= 0 && session != NULL);
	AN_ASSERT(addr_len <= sizeof(struct sockaddr_storage));
	if (k->host_len == 0 || k->host_len > LIMITS_HOST_BYTES_MAX)
		return false;
	struct uppool_entry *e = NULL;
	for (uint32_t i = 0; i < UPPOOL_ENTRIES && e == NULL; i++)
		e = p->entries[i].state == UPPOOL_FREE ? &p->entries[i] : NULL;
	if (e == NULL)
		return false;
	e->state = UPPOOL_PARKED;
	e->close_on_leave = false;
	e->port = k->port;
	e->host_len = (uint8_t)k->host_len;
	memcpy(e->host, k->host, k->host_len);
	e->host[k->host_len] = '\0';
	e->ca_hash = text_hash(k->ca_file, k->ca_file ? strlen(k->ca_file) : 0);
	e->secret_hash = text_hash(k->secret, k->secret_len);
	e->fd = fd;
	e->session = session;
	memset(&e->addr, 0, sizeof(e->addr));
	memcpy(&e->addr, addr, addr_len);
	e->parked_ms = now_ms;
	p->parked++;
	struct io_uring_sqe *sqe = ring_sqe(p->ring);
	io_uring_prep_poll_add(sqe, fd, POLLIN | POLLRDHUP);
	sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data64(sqe, ud_encode(e, UPPOOL_OP));
	return true;
}

bool uppool_take(struct uppool *p, const struct uppool_key *k, int32_t *fd, void **session,
		 struct sockaddr_storage *addr)
{
	AN_ASSERT(fd != NULL && session != NULL && addr != NULL);
	AN_ASSERT(p->parked <= UPPOOL_ENTRIES);
	for (uint32_t i = 0; p->parked > 0 && i < UPPOOL_ENTRIES; i++) {
		struct uppool_entry *e = &p->entries[i];
		if (!entry_matches(e, k))
			continue;
		*fd = e->fd;
		*session = e->session;
		memcpy(addr, &e->addr, sizeof(*addr));
		e->fd = -1;
		e->session = NULL;
		entry_leave(p, e, false);
		p->reused++;
		return true;
	}
	return false;
}

/* The entry's slot and session, closed and freed: nothing of ours touches them any more. */
static void entry_close(struct uppool *p, struct uppool_entry *e)
{
	AN_ASSERT(e->fd >= 0 && e->session != NULL);
	struct io_uring_sqe *sqe = ring_sqe(p->ring);
	io_uring_prep_close_direct(sqe, (unsigned)e->fd);
	io_uring_sqe_set_data64(sqe, 0);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	p->term->session_free(e->session);
	e->fd = -1;
	e->session = NULL;
}

void uppool_on_cqe(struct uppool *p, struct uppool_entry *e, int res)
{
	AN_ASSERT(e >= p->entries && e < p->entries + UPPOOL_ENTRIES);
	AN_ASSERT(e->state != UPPOOL_FREE);
	(void)res; /* readable, closed, failed or cancelled: the poll is over either way */
	if (e->state == UPPOOL_PARKED) {
		/* The upstream spoke or left while idle: not a connection to hand out. */
		e->state = UPPOOL_LEAVING;
		e->close_on_leave = true;
		p->parked--;
		p->leaving++;
	}
	AN_ASSERT(p->leaving > 0);
	if (e->close_on_leave)
		entry_close(p, e);
	e->state = UPPOOL_FREE;
	p->leaving--;
}

void uppool_expire(struct uppool *p, uint64_t now_ms)
{
	AN_ASSERT(p != NULL);
	AN_ASSERT(p->parked <= UPPOOL_ENTRIES);
	for (uint32_t i = 0; p->parked > 0 && i < UPPOOL_ENTRIES; i++) {
		struct uppool_entry *e = &p->entries[i];
		if (e->state == UPPOOL_PARKED && now_ms - e->parked_ms >= UPPOOL_IDLE_MS)
			entry_leave(p, e, true);
	}
}

void uppool_drain(struct uppool *p)
{
	AN_ASSERT(p != NULL);
	for (uint32_t i = 0; p->parked > 0 && i < UPPOOL_ENTRIES; i++) {
		if (p->entries[i].state == UPPOOL_PARKED)
			entry_leave(p, &p->entries[i], true);
	}
	AN_ASSERT(p->parked == 0);
}

bool uppool_quiet(const struct uppool *p)
{
	AN_ASSERT(p != NULL);
	return p->parked == 0 && p->leaving == 0;
}
