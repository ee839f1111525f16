// Writing Medusa heads together with ProPD prune heads and recall tables: one heads file
// (general.architecture "medusa") or a copy of the model with everything inside.
#pragma once

#include <string>

#include "drafters/medusa/medusa_heads.h"
#include "drafters/propd/prune_head.h"

namespace treespec::model {
class Model;
}

namespace treespec::drafters {

// `prune` may be null (a plain Medusa heads file).
void write_heads_file(const std::string& path, const MedusaHeads& heads, const PruneHeadSet* prune);
void write_model_with_all_heads(const model::Model& m, const MedusaHeads& heads, const PruneHeadSet* prune,
                                const std::string& path);

}  // namespace treespec::drafters
