/*
 * The C half of the plugin logger (see logger.rs).
 *
 * NCCL hands plugins a C-variadic `ncclDebugLogger_t`. Stable Rust can call but not define such a
 * function, so this shim receives the call, formats it with vsnprintf into a stack buffer, and
 * forwards the finished string to a Rust `extern "C"` sink that Rust installs at start-up.
 *
 * Rust installs the sink through nccl_net_shim_install() rather than the shim calling a
 * `#[no_mangle]` Rust symbol: that keeps the dependency one-way (Rust -> C), so the link order of
 * the static library and the rlib cannot matter.
 *
 * The threshold test happens here, before vsnprintf, so a chatty plugin logging TRACE lines on its
 * data path costs one atomic load per line when tracing is off. WARN (and ABORT) lines are always
 * forwarded: Rust keeps the last few to explain a later failing call.
 */
#include <stdarg.h>
#include <stdio.h>

typedef void (*nccl_net_sink_t)(int level, unsigned long flags, const char *file, int line,
                                const char *msg);

static nccl_net_sink_t g_sink;  /* accessed with __atomic builtins only */
static int g_threshold;         /* NCCL level: forward when level <= threshold (NONE=0 .. TRACE=5) */

enum { LVL_NONE = 0, LVL_WARN = 2, LVL_ABORT = 4 };

void nccl_net_shim_install(nccl_net_sink_t sink) { __atomic_store_n(&g_sink, sink, __ATOMIC_RELEASE); }

void nccl_net_shim_set_threshold(int threshold) {
  __atomic_store_n(&g_threshold, threshold, __ATOMIC_RELAXED);
}

void nccl_net_shim_logger(int level, unsigned long flags, const char *file, int line,
                          const char *fmt, ...) {
  nccl_net_sink_t sink = __atomic_load_n(&g_sink, __ATOMIC_ACQUIRE);
  if (sink == NULL || level == LVL_NONE) return;
  int always = (level == LVL_WARN || level == LVL_ABORT);
  if (!always && level > __atomic_load_n(&g_threshold, __ATOMIC_RELAXED)) return;

  char buf[1024];
  if (fmt == NULL) {
    buf[0] = '\0';
  } else {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) buf[0] = '\0'; /* encoding error: forward an empty message rather than garbage */
  }
  sink(level, flags, file, line, buf);
}
