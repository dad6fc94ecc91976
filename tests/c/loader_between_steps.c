/* A C training loop whose loader thread fills the batch between steps, the common pattern, under
 * a migration policy (TENSORTIER_POLICY, set by the test). Each step's first layer checks that it
 * reads the batch the loader wrote for that step, page by page.
 *
 *   loader_between_steps [pin]
 *     (none): the loader writes unpinned: the runtime must see the writes in its profile and
 *             leave the batch in place (docs/RELIABILITY.md)
 *     pin:    the loader brackets its writes with tt_pin / tt_unpin
 * Exit 0 when every page of every step held its step's value; 1 with a count of stale pages. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensortier/tensortier.h>

enum { kSteps = 60, kBatchBytes = 4 << 20, kPage = 4096, kLayers = 8, kActBytes = 4 << 20 };

static tt_runtime* rt;
static uint64_t batch_id;
static int use_pins;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int filled_for = -1; /* the step whose batch the loader wrote last */
static int wanted = 0;      /* the step whose batch the trainer wants next */

static int check(tt_status s, const char* what) {
  if (s == TT_OK) return 0;
  fprintf(stderr, "%s: %s\n", what, tt_last_error());
  exit(2);
}

static void fill(int step) {
  void* address = NULL;
  if (use_pins) {
    check(tt_pin(rt, &batch_id, 1, &address), "tt_pin");
  } else {
    check(tt_address_of(rt, batch_id, &address), "tt_address_of");
  }
  memset(address, (step % 250) + 1, kBatchBytes);
  if (use_pins) check(tt_unpin(rt, &batch_id, 1), "tt_unpin");
}

static void* loader(void* unused) {
  (void)unused;
  for (int step = 0; step < kSteps; ++step) {
    pthread_mutex_lock(&lock);
    while (wanted < step) pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    fill(step);
    pthread_mutex_lock(&lock);
    filled_for = step;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
  }
  return NULL;
}

int main(int argc, char** argv) {
  use_pins = argc > 1 && strcmp(argv[1], "pin") == 0;
  check(tt_runtime_create("fast=dram:256MiB,slow=emulated:optane-server:1GiB", &rt), "tt_runtime_create");
  void* batch = NULL;
  check(tt_alloc(rt, "batch", kBatchBytes, 1, &batch), "tt_alloc");
  check(tt_object_id(rt, batch, &batch_id), "tt_object_id");
  uint64_t weights[kLayers];
  for (int l = 0; l < kLayers; ++l) {
    void* w = NULL;
    check(tt_alloc(rt, "weight", kActBytes, 2, &w), "tt_alloc");
    memset(w, l, kActBytes);
    check(tt_object_id(rt, w, &weights[l]), "tt_object_id");
  }
  pthread_t thread;
  if (pthread_create(&thread, NULL, loader, NULL) != 0) return 2;
  long stale_pages = 0;
  for (int step = 0; step < kSteps; ++step) {
    pthread_mutex_lock(&lock);
    wanted = step;
    pthread_cond_broadcast(&changed);
    while (filled_for < step) pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    check(tt_step_begin(rt), "tt_step_begin");
    uint64_t acts[kLayers];
    void* addresses[4];
    for (int l = 0; l < kLayers; ++l) {
      void* a = NULL;
      check(tt_alloc(rt, "act", kActBytes, 3, &a), "tt_alloc");
      check(tt_object_id(rt, a, &acts[l]), "tt_object_id");
      /* The first layer reads the batch (images), the last one too (labels). */
      const uint64_t reads[3] = {l == 0 ? batch_id : acts[l - 1], weights[l], batch_id};
      const size_t read_count = l == kLayers - 1 ? 3 : 2;
      check(tt_layer_begin_ids(rt, "layer", reads, read_count, &acts[l], 1, addresses), "tt_layer_begin_ids");
      const unsigned char* in = addresses[0];
      if (l == 0) {
        for (long p = 0; p < kBatchBytes / kPage; ++p) stale_pages += in[p * kPage] != (step % 250) + 1;
      }
      /* Some compute, so that moves can hide behind the layers. */
      unsigned char* out = addresses[read_count];
      for (int pass = 0; pass < 2; ++pass) {
        for (long i = 0; i < kActBytes; i += 64) out[i] = (unsigned char)(out[i] + in[i] + pass);
      }
      check(tt_layer_end(rt), "tt_layer_end");
      if (l > 0) check(tt_free(rt, addresses[0]), "tt_free");
    }
    void* last = NULL;
    check(tt_address_of(rt, acts[kLayers - 1], &last), "tt_address_of");
    check(tt_free(rt, last), "tt_free");
    check(tt_step_end(rt), "tt_step_end");
  }
  pthread_join(thread, NULL);
  tt_runtime_destroy(rt);
  if (stale_pages != 0) {
    printf("FAIL: layer 0 read %ld stale batch pages in %d steps\n", stale_pages, kSteps);
    return 1;
  }
  printf("ok: layer 0 read the batch of its own step in all %d steps\n", kSteps);
  return 0;
}
