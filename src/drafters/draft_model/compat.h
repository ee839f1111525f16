// Loading a draft model file and checking that it speaks the target's vocabulary.
#pragma once

#include <memory>
#include <string>

namespace treespec::model {
class Model;
}

namespace treespec::drafters {

// Throws InvalidArgument naming both files and what differs when `draft` cannot draft
// for `target`: vocabulary size, tokenizer type, any token text (the first differing id
// is named), or the BOS / EOS ids. Token ids are compared as the engine uses them: a draft
// token is verified as the target token with the same id.
void check_draft_compatible(const model::Model& target, const model::Model& draft);

// The draft model at `path`, loaded once per process while any drafter uses it (the
// server and the bench make one drafter per sequence), and checked against `target`.
std::shared_ptr<const model::Model> load_draft_model(const std::string& path, const model::Model& target);

}  // namespace treespec::drafters
