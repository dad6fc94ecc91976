// Links the installed C++ API: allocates on a two-tier spec and checks the placement.
#include <tensortier/runtime.h>

#include <cstdio>

int main() {
  auto rt = tensortier::Runtime::create({"fast=dram:1MiB,slow=emulated:cxl:64MiB"});
  if (!rt) {
    std::fprintf(stderr, "%s\n", rt.status().to_string().c_str());
    return 1;
  }
  auto big = rt.value()->allocate("big", 4 << 20);
  if (!big || big->tier != 1) return 2;  // over the fast budget: must land on the slow tier
  std::puts("consumer_cpp ok");
  return 0;
}
