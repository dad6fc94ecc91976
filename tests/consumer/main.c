/* Links the installed C API. */
#include <stdio.h>
#include <tensortier/tensortier.h>

int main(void) {
  tt_runtime* rt = NULL;
  void* p = NULL;
  if (tt_runtime_create("fast=dram:16MiB", &rt) != TT_OK) {
    fprintf(stderr, "%s\n", tt_last_error());
    return 1;
  }
  if (tt_alloc(rt, "x", 1000, 0, &p) != TT_OK || p == NULL) return 2;
  if (tt_free(rt, p) != TT_OK || tt_free(rt, p) != TT_NOT_FOUND) return 3;
  tt_runtime_destroy(rt);
  puts("consumer_c ok");
  return 0;
}
