#include "drafters/propd/heads_file.h"

#include "gguf/gguf.h"
#include "model/model.h"

namespace treespec::drafters {

void write_heads_file(const std::string& path, const MedusaHeads& heads, const PruneHeadSet* prune) {
  gguf::GgufWriter w;
  const auto& info = heads.info();
  w.set("general.architecture", gguf::Value::string("medusa"));
  w.set("general.name",
        gguf::Value::string(info.base_name.empty() ? "medusa heads" : info.base_name + " medusa heads"));
  heads.add_to(w);
  if (prune) prune->add_to(w);
  w.write(path);
}

void write_model_with_all_heads(const model::Model& m, const MedusaHeads& heads, const PruneHeadSet* prune,
                                const std::string& path) {
  const auto& f = m.gguf();
  gguf::GgufWriter w(f.version() >= 2 ? f.version() : 3);
  w.set_alignment(f.alignment());
  auto ours = [](const std::string& name) { return name.rfind("medusa.", 0) == 0 || name.rfind("propd.", 0) == 0; };
  for (const auto& [key, value] : f.metadata()) {
    if (key == "general.alignment" || ours(key)) continue;  // replaced below
    w.set(key, value);
  }
  for (const auto& t : f.tensors()) {
    if (ours(t.name)) continue;
    w.add_tensor(t.name, t.type, t.ne, t.data, static_cast<size_t>(t.nbytes));
  }
  heads.add_to(w);
  if (prune) prune->add_to(w);
  w.write(path);
}

}  // namespace treespec::drafters
