// `train --global-batch`: the prototxt's batch_size is the batch of all ranks together, so
// each of N ranks reads batch_size / N (Caffe's rule, the default, makes it per rank).
#pragma once

#include <string>

#include "caffe.pb.h"

namespace bks {

// Divides the batch_size of every data layer the TRAIN phase runs by `ranks`; InputError
// naming the layer when one does not divide, or when no layer has a batch to divide.
void divide_train_batch(proto::NetParameter& net, int ranks, const std::string& where);

}  // namespace bks
