// Ranking logits: the one tie rule every part of treespec uses (most likely first, equal
// logits to the lower id, NaN never ahead of a number). Sampling's top-k, Medusa's
// candidates, early pruning's keep test, the draft model's children, logprobs'
// alternatives and the trainers' accuracy tables all rank with these, so a token's rank
// is the same wherever it is asked.
#pragma once

#include <cstdint>
#include <vector>

namespace treespec::sampling {

// The ids of the k largest logits[0..n), most likely first, ties to the lower id. NaN
// logits rank after every number (among themselves by id), so out holds k distinct ids.
// Requires 0 <= k <= n.
void top_k_ids(const float* logits, int32_t n, int32_t k, int32_t* out);

// How many ids rank ahead of `target` under the same rule (0 = it is the argmax). A NaN
// target ranks after every number.
int32_t rank_of(const float* logits, int32_t n, int32_t target);

// The k most likely tokens of softmax(logits) at temperature 1 with their probabilities
// (ids ranked by top_k_ids; k clamped to n). The draft model's and EAGLE's candidates.
struct TopProbs {
  std::vector<int32_t> ids;
  std::vector<float> p;
};
TopProbs top_softmax(const float* logits, int32_t n, int32_t k);

}  // namespace treespec::sampling
