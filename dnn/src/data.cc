// Fashion-MNIST IDX reader, synthetic data and batching (see data.h).
#include "tensortier/dnn/data.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>

#include <fmt/format.h>

#include "tensortier/dnn/idx.h"

namespace tensortier::dnn {
namespace {

// Fashion-MNIST training-set statistics of pixels scaled to [0,1].
constexpr float kMean = 0.2860F;
constexpr float kStd = 0.3530F;

// The whole decompressed content of a gzip file.
Result<std::vector<unsigned char>> read_gzip(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    return not_found(
        fmt::format("'{}' does not exist: install Debian's dataset-fashion-mnist package "
                    "(tools/setup.sh does) or pass --data-dir",
                    path));
  }
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return not_found(fmt::format("cannot open '{}'", path));
  std::vector<unsigned char> out;
  unsigned char buffer[1 << 16];
  int n = 0;
  while ((n = gzread(file, buffer, sizeof buffer)) > 0) out.insert(out.end(), buffer, buffer + n);
  int err = 0;
  const char* message = gzerror(file, &err);
  const std::string error_text = err != Z_OK && err != Z_STREAM_END ? message : "";
  gzclose(file);
  if (n < 0 || !error_text.empty()) {
    return invalid_argument(fmt::format("'{}' is not a readable gzip file ({})", path, error_text));
  }
  return out;
}

}  // namespace

Result<Dataset> load_fashion_mnist(const std::string& dir, bool train, std::size_t limit) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
  auto images = read_gzip(images_path);
  if (!images) return images.status();
  auto labels = read_gzip(labels_path);
  if (!labels) return labels.status();
  auto image_dims = parse_idx_header(images.value(), 3, images_path);
  if (!image_dims) return image_dims.status();
  auto label_dims = parse_idx_header(labels.value(), 1, labels_path);
  if (!label_dims) return label_dims.status();
  if ((*image_dims)[0] != (*label_dims)[0]) {
    return invalid_argument(fmt::format("'{}' has {} images but '{}' has {} labels", images_path,
                                        (*image_dims)[0], labels_path, (*label_dims)[0]));
  }
  Dataset d;
  d.channels = 1;
  d.height = static_cast<int>((*image_dims)[1]);
  d.width = static_cast<int>((*image_dims)[2]);
  d.classes = 10;
  std::size_t count = (*image_dims)[0];
  if (limit > 0) count = std::min(count, limit);
  const std::size_t pixels = static_cast<std::size_t>(d.height) * static_cast<std::size_t>(d.width);
  d.images.resize(count * pixels);
  d.labels.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    const unsigned char label = (*labels)[8 + i];
    if (label >= 10)
      return invalid_argument(fmt::format("'{}': label {} of sample {} is not 0..9", labels_path, label, i));
    d.labels[i] = label;
    for (std::size_t p = 0; p < pixels; ++p) {
      d.images[i * pixels + p] = (static_cast<float>((*images)[16 + i * pixels + p]) / 255.0F - kMean) / kStd;
    }
  }
  return d;
}

Dataset synthetic_dataset(std::size_t count, int channels, int height, int width, int classes,
                          std::uint64_t seed) {
  Dataset d;
  d.channels = channels;
  d.height = height;
  d.width = width;
  d.classes = classes;
  const std::size_t size =
      static_cast<std::size_t>(channels) * static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0F, 1.0F);
  std::vector<float> patterns(static_cast<std::size_t>(classes) * size);
  for (auto& v : patterns) v = noise(rng);
  d.images.resize(count * size);
  d.labels.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    const auto label = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(classes));
    d.labels[i] = label;
    for (std::size_t p = 0; p < size; ++p) {
      d.images[i * size + p] = patterns[static_cast<std::size_t>(label) * size + p] + 0.5F * noise(rng);
    }
  }
  return d;
}

BatchIterator::BatchIterator(const Dataset& data, std::size_t batch_size, std::uint64_t seed, bool shuffle,
                             bool drop_last)
    : data_(data),
      batch_size_(batch_size),
      order_(data.count()),
      rng_(seed),
      shuffle_(shuffle),
      drop_last_(drop_last) {
  std::iota(order_.begin(), order_.end(), std::size_t{0});
  if (shuffle_) std::shuffle(order_.begin(), order_.end(), rng_);
}

Status BatchIterator::next(Engine& engine, Batch& batch) {
  if (batch_size_ == 0 || data_.count() < batch_size_) {
    return invalid_argument(
        fmt::format("batch size {} is larger than the data set ({} samples)", batch_size_, data_.count()));
  }
  // A new epoch once every sample was served (or, dropping the last batch, fewer than a batch are left).
  if (position_ >= order_.size() || (drop_last_ && position_ + batch_size_ > order_.size())) {
    position_ = 0;
    if (shuffle_) std::shuffle(order_.begin(), order_.end(), rng_);
  }
  const std::size_t count = std::min(batch_size_, order_.size() - position_);
  const auto n = static_cast<dnnl::memory::dim>(count);
  const dnnl::memory::dims dims{n, data_.channels, data_.height, data_.width};
  // A batch made for another number of samples (the epoch's last) or another data set's images
  // (a batch reused across sets) gets tensors of the right size: never written past its end.
  if (batch.images.empty() || batch.images.dims() != dims || batch.labels.elements() != count) {
    engine.release(batch.images);
    engine.release(batch.labels);
    const dnnl::memory::desc images(dims, dnnl::memory::data_type::f32, dnnl::memory::format_tag::nchw);
    const dnnl::memory::desc labels({n}, dnnl::memory::data_type::s32, dnnl::memory::format_tag::x);
    auto i = engine.allocate("batch.images", images, kBatch);
    if (!i) return i.status();
    auto l = engine.allocate("batch.labels", labels, kBatch);
    if (!l) return l.status();
    batch.images = std::move(i).value();
    batch.labels = std::move(l).value();
  }
  const std::size_t size = data_.images.size() / data_.count();
  // Between steps a migration policy may be moving the batch: filled pinned (or, in device
  // memory, copied in).
  TENSORTIER_RETURN_IF_ERROR(engine.write_from_host({&batch.images, &batch.labels}, [&](const auto& bytes) {
    auto* images = static_cast<float*>(bytes[0]);
    auto* labels = static_cast<std::int32_t*>(bytes[1]);
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t sample = order_[position_ + k];
      std::memcpy(images + k * size, data_.images.data() + sample * size, size * sizeof(float));
      labels[k] = data_.labels[sample];
    }
  }));
  position_ += count;
  return Status::ok();
}

}  // namespace tensortier::dnn
