/* The growable text buffer of core/textbuf.h. */
#include "core/textbuf.h"

#include <stdarg.h>
#include <stdio.h>

#include "core/an.h"
#include "core/pool.h"

void textbuf_add(struct textbuf *t, const char *fmt, ...)
{
	va_list ap;

	for (int attempt = 0; attempt < 2 && !t->failed; attempt++) {
		va_start(ap, fmt);
		int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->failed = true;
			return;
		}
		if (t->p != NULL && (size_t)n < t->cap - t->len) {
			t->len += (size_t)n;
			return;
		}
		size_t want =
		    t->cap * 2 > t->len + (size_t)n + 1 ? t->cap * 2 : t->len + (size_t)n + 64;
		char *grown = pool_realloc(t->p, want);
		if (grown == NULL) {
			t->failed = true;
			return;
		}
		t->p = grown;
		t->cap = want;
	}
}

void textbuf_free(struct textbuf *t)
{
	AN_FREE(&t->p);
	t->len = 0;
	t->cap = 0;
	t->failed = false;
}
