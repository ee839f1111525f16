#include "engine/grammar_step.h"

#include "sampling/sampling.h"

namespace treespec::engine {

std::shared_ptr<const grammar::TokenMask> make_token_mask(const tokenizer::Tokenizer& tok) {
  std::vector<std::string> pieces(static_cast<size_t>(tok.n_vocab()));
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (!tok.is_control(id)) pieces[static_cast<size_t>(id)] = tok.token_to_piece(id, false);
  }
  return std::make_shared<const grammar::TokenMask>(std::move(pieces), tok.eog_ids());
}

bool GrammarStep::cut(const tree::TokenTree& drafted, const grammar::Constraint& c, const grammar::State& s0,
                      bool ignore_eog) {
  mask_ = c.mask.get();
  drafted_ = drafted;
  const int32_t n = drafted_.size();
  states_.assign(static_cast<size_t>(n), grammar::State());
  kept_.clear();
  fwd_of_.assign(static_cast<size_t>(n), -1);
  std::vector<uint8_t> alive(static_cast<size_t>(n), 0);
  for (int32_t k = 0; k < n; ++k) {
    bool keep = true;
    if (k == 0) {
      states_[0] = s0;
    } else {
      const int32_t p = drafted_.parent(k);
      keep = alive[static_cast<size_t>(p)] != 0;
      if (keep && drafted_.is_candidate(k)) {
        const grammar::State& ps = states_[static_cast<size_t>(p)];
        // Nothing follows an end-of-generation token (unless the request ignores it).
        const bool after_end = p > 0 && mask_->is_eog(drafted_.token(p)) && !ignore_eog;
        keep = !after_end && mask_->allows(ps, drafted_.token(k));
        if (keep) states_[static_cast<size_t>(k)] = mask_->advance(ps, drafted_.token(k));
      }
    }
    if (!keep) continue;
    alive[static_cast<size_t>(k)] = 1;
    fwd_of_[static_cast<size_t>(k)] = static_cast<int32_t>(kept_.size());
    kept_.push_back(k);
  }
  return static_cast<int32_t>(kept_.size()) < n;
}

void GrammarStep::mask_row(int32_t node, float* row, bool greedy) const {
  if (!drafted_.is_candidate(node)) return;
  const grammar::State& s = states_[static_cast<size_t>(node)];
  if (greedy && mask_->allows(s, sampling::argmax(row, mask_->n_vocab()))) return;
  mask_->apply(s, row);
}

}  // namespace treespec::engine
