// docs/STUDY.md and its charts (gnuplot, through the demo's figure renderer): the protocol, the
// results tables with the seed spread, the published shapes beside ours, and the training and
// fine-tuning curves.
#pragma once

#include <vector>

#include "arms.h"
#include "corpus.h"
#include "study.h"
#include "train.h"

namespace posenc::study {

void WriteReport(const Settings& settings, const Corpus& corpus, const std::vector<Run>& runs,
                 const std::vector<Arm>& arms, const StudyPaths& paths, int threads);

}  // namespace posenc::study
