/*
 * A growable text buffer for answers built line by line (the control
 * socket's listings, the metrics' exposition): printf-style appends into
 * pool memory, doubling as it fills. An append that cannot be made (out of
 * memory) marks the buffer failed and every later append does nothing, so a
 * caller checks once, at the end.
 */
#ifndef AN_CORE_TEXTBUF_H
#define AN_CORE_TEXTBUF_H

#include <stdbool.h>
#include <stddef.h>

struct textbuf {
	char *p; /* owned (pool memory), NUL-terminated once anything was added; NULL before */
	size_t len;
	size_t cap;
	bool failed;
};

/* Appends what <fmt> formats to <t>, unless it failed already. */
void textbuf_add(struct textbuf *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Frees <t>'s text and empties it. */
void textbuf_free(struct textbuf *t);

#endif /* AN_CORE_TEXTBUF_H */
