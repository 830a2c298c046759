// The P/D dialects by kvEngineType (dialect.h): a new engine family is its file here plus its
// line below (and its name in engines/pd_dialect.h dialectFromName).
#include "proxy/pd/dialect.h"

namespace kvgate::proxy {

const PdDialect& vllmPdDialect();    // vllm.cc
const PdDialect& sglangPdDialect();  // sglang.cc
const PdDialect& trtllmPdDialect();  // trtllm.cc

const PdDialect& pdDialect(engines::pd::Dialect d) {
  switch (d) {
    case engines::pd::Dialect::kSglang:
      return sglangPdDialect();
    case engines::pd::Dialect::kTrtllm:
      return trtllmPdDialect();
    case engines::pd::Dialect::kVllm:
      break;
  }
  return vllmPdDialect();
}

}  // namespace kvgate::proxy
