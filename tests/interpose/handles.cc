// A plain oneDNN program (no tensortier call) that uses every kind of buffer a memory can have,
// for the interposer's test (run_check.py): a memory oneDNN allocates, a second memory over the
// first one's buffer (an alias, at its start and 256 floats in), a memory over the program's own
// vector, one made without a buffer and given one later, a memory re-pointed at the program's
// buffer, and host access by get_data_handle and by map_data. Runs a few iterations of ReLU in
// place, reorders and a sum so the step detector sees a loop, and prints what it computed.
#include <cmath>
#include <cstdio>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

int main() {
  using dnnl::memory;
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const memory::desc d({4, 8, 16, 16}, memory::data_type::f32, memory::format_tag::nchw);
  const memory::desc half({2, 8, 16, 16}, memory::data_type::f32, memory::format_tag::nchw);
  const std::size_t n = d.get_size() / sizeof(float);
  memory a(d, eng);                                                          // oneDNN's buffer: an object
  memory alias(d, eng, a.get_data_handle());                                 // the same bytes
  memory tail(half, eng, static_cast<float*>(a.get_data_handle()) + n / 2);  // inside it
  std::vector<float> own(n);
  memory user(d, eng, own.data());  // the program's buffer
  memory later(d, eng, DNNL_MEMORY_NONE);
  later.set_data_handle(own.data());
  memory out(d, eng);
  const dnnl::eltwise_forward relu(
      {{dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_relu, d, 0.0F}, eng});
  const dnnl::eltwise_forward relu_half(
      {{dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_abs, half, 0.0F}, eng});
  const dnnl::sum sum(dnnl::sum::primitive_desc(d, {1.0F, 0.5F}, {d, d}, eng));
  double total = 0;
  for (int it = 0; it < 8; ++it) {
    for (std::size_t i = 0; i < n; ++i) own[i] = std::sin(static_cast<float>(i + it));
    dnnl::reorder(user, a).execute(s, user, a);                       // program's -> object
    relu.execute(s, {{DNNL_ARG_SRC, alias}, {DNNL_ARG_DST, alias}});  // in place, through the alias
    relu_half.execute(s, {{DNNL_ARG_SRC, tail}, {DNNL_ARG_DST, tail}});
    sum.execute(s, {{DNNL_ARG_MULTIPLE_SRC, a}, {DNNL_ARG_MULTIPLE_SRC + 1, later}, {DNNL_ARG_DST, out}});
    s.wait();
    const auto* mapped = static_cast<const float*>(out.map_data());
    for (std::size_t i = 0; i < n; i += 7) total += mapped[i];
    out.unmap_data(const_cast<float*>(mapped));
  }
  // Re-pointed at the program's buffer: oneDNN frees its own, and the object goes with it.
  out.set_data_handle(own.data());
  relu.execute(s, {{DNNL_ARG_SRC, out}, {DNNL_ARG_DST, out}});
  s.wait();
  double last = 0;
  for (std::size_t i = 0; i < n; ++i) last += own[i];
  std::printf("total %.9g last %.9g\n", total, last);
  return 0;
}
