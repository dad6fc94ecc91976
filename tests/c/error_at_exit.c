/* The C API from an atexit handler, after a failed call: the thread's error message must still be
 * there to read and to replace while exit() runs the handlers (it once lived in a thread-local
 * std::string, destroyed before them: "malloc(): unaligned tcache chunk detected").
 * Exit 0 when every call in the handler behaved. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tensortier/tensortier.h>

static tt_runtime* rt;
static int failures;

static void expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "error_at_exit: FAIL: %s\n", what);
    ++failures;
  }
}

static void at_exit(void) {
  expect(tt_last_error()[0] != '\0', "the failed call's message is readable in the handler");
  /* A failure whose message is longer than the first's: a destroyed string would free its old
   * buffer a second time here. */
  tt_runtime* bad = NULL;
  expect(tt_runtime_create("fast=dram:lots-and-lots-of-memory-more-than-any-machine-has-at-all,"
                           "slow=emulated:optane:even-more-than-that-of-the-slow-kind",
                           &bad) == TT_INVALID_ARGUMENT,
         "a bad spec in the handler is refused");
  expect(strstr(tt_last_error(), "lots-and-lots") != NULL, "and its message quotes it");
  int x = 0;
  expect(tt_free(rt, &x) == TT_NOT_FOUND, "a bad free in the handler is refused");
  void* p = NULL;
  expect(tt_alloc(rt, "late", 4096, 0, &p) == TT_OK && p != NULL, "an allocation in the handler");
  expect(tt_free(rt, p) == TT_OK && tt_last_error()[0] == '\0', "its free, which clears the message");
  tt_runtime_destroy(rt);
  if (failures != 0) _exit(1);
  puts("ok: the C API works from an atexit handler");
}

int main(void) {
  if (tt_runtime_create("fast=dram:16MiB", &rt) != TT_OK) {
    fprintf(stderr, "%s\n", tt_last_error());
    return 2;
  }
  int x = 0;
  if (tt_free(rt, &x) != TT_NOT_FOUND) return 2; /* a failed call: the message is set */
  atexit(at_exit);
  return 0;
}
