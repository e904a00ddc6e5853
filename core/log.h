/*
 * Operator log: one line per event on standard error,
 * "2026-12-05T12:40:01.123Z agentsnetd: <level>: <message>", the time UTC to
 * the millisecond. When standard error is the systemd journal
 * ($JOURNAL_STREAM names it), the journal stamps each line and the time is
 * left out. Not the audit trail (core/audit.h) and not on the data path: the
 * engine logs start-up, shutdown and faults, never per request.
 */
#ifndef AN_CORE_LOG_H
#define AN_CORE_LOG_H

enum log_level {
	LOG_ERROR = 0,
	LOG_WARN,
	LOG_INFO,
	LOG_DEBUG,
};

/*
 * Messages above <level> are discarded (default LOG_INFO); whether lines carry
 * the time is decided here, from $JOURNAL_STREAM and standard error. Call
 * before threads start.
 */
void log_set_level(enum log_level level);
/* Formats and writes one line atomically (a single write). Any thread. */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* As log_msg, but "agentsnetd: <message>" with no level: the start's "ready" line. */
void log_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif /* AN_CORE_LOG_H */
