// Training data: the Fashion-MNIST reader (Debian's dataset-fashion-mnist package: gzip IDX
// files), a synthetic generator for any shape, and a shuffling batch iterator whose batches are
// runtime objects.
//
// Thread safety: a Dataset is immutable after loading; a BatchIterator belongs to one thread.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tensortier/dnn/network.h"

namespace tensortier::dnn {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  std::vector<float> images;         // count x channels x height x width, normalized
  std::vector<std::int32_t> labels;  // count
  int channels = 0, height = 0, width = 0, classes = 0;
  std::size_t count() const { return labels.size(); }
};

// Reads train-images-idx3-ubyte.gz / train-labels-idx1-ubyte.gz (or t10k-* for the test split)
// from `dir`, scaled to [0,1] and normalized with Fashion-MNIST's mean and std. `limit` > 0 keeps
// the first `limit` samples. A missing, truncated or malformed file is an error naming it.
Result<Dataset> load_fashion_mnist(const std::string& dir, bool train, std::size_t limit = 0);

// `count` samples of random images, each class a different mean pattern plus noise, so that a
// model can learn them; deterministic for a seed.
Dataset synthetic_dataset(std::size_t count, int channels, int height, int width, int classes,
                          std::uint64_t seed);

// Batches of a dataset in a shuffled order (reshuffled each epoch). As PyTorch's DataLoader: an
// epoch's last batch holds the samples left (fewer than batch_size when it does not divide the
// data set; Network trains and evaluates such a batch), unless drop_last, which drops them so
// that every batch has batch_size samples.
class BatchIterator {
 public:
  BatchIterator(const Dataset& data, std::size_t batch_size, std::uint64_t seed, bool shuffle = true,
                bool drop_last = false);
  std::size_t batches_per_epoch() const {
    return drop_last_ ? data_.count() / batch_size_ : (data_.count() + batch_size_ - 1) / batch_size_;
  }
  // Fills a batch with the next samples, allocating its tensors from the engine on first use and
  // again when the batch it is given holds another number or shape of samples (the epoch's last).
  Status next(Engine& engine, Batch& batch);

 private:
  const Dataset& data_;
  std::size_t batch_size_;
  std::vector<std::size_t> order_;
  std::size_t position_ = 0;
  std::mt19937_64 rng_;
  bool shuffle_;
  bool drop_last_;
};

}  // namespace tensortier::dnn
