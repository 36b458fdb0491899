#pragma once
// Legend names for a GradientHistogram's layers, as plot.py --labels reads them (layer,label): a module's
// output gradient as "1 Linear 784->256 (out)", a parameter as "1.weight 256x784". amp_underflow and
// fp8_training write them next to their hist.csv.
#include <set>
#include <sstream>
#include <string>

#include "amp/inspect/histogram.h"
#include "amp/inspect/text_file.h"
#include "nn/module.h"

namespace example {

// "1 Linear" for a module named "1" in m; the name itself otherwise.
inline std::string layer_label(const hg::nn::Module& m, const std::string& name) {
  for (const auto& [n, child] : m.named_modules())
    if (n == name) return name + " " + child->type_name();
  return name;
}

// The labels CSV (layer,label) of every layer h recorded from model.
inline std::string hist_labels_csv(const hg::amp::inspect::GradientHistogram& h, const hg::nn::Module& model) {
  namespace insp = hg::amp::inspect;
  std::ostringstream os;
  os << "layer,label\n";
  std::set<std::string> seen;
  for (const auto& [name, kind] : h.keys()) {
    if (!seen.insert(name).second) continue;
    std::string label = name;
    for (const auto& [n, p] : model.named_parameters())
      if (n == name) {
        label += " ";
        for (int64_t i = 0; i < p.ndim(); ++i) {
          if (i) label += 'x';
          label += std::to_string(p.shape()[i]);
        }
      }
    for (const auto& [n, child] : model.named_modules()) {
      if (n != name) continue;
      label = layer_label(model, name);
      for (const auto& [pn, p] : child->named_parameters())
        if (pn == "weight" && p.ndim() == 2) label += " " + std::to_string(p.shape()[1]) + "->" + std::to_string(p.shape()[0]);
      label += " (out)";
    }
    os << insp::csv_field(name) << "," << insp::csv_field(label) << "\n";
  }
  return os.str();
}

}  // namespace example
