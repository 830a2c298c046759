// The response filter chain (response_filter.h): one line per filter, in the order they run. A
// new response filter is its file under src/proxy/filters/ and its line here.
#include "proxy/filters/response_filter.h"

namespace kvgate::proxy {

const std::vector<const ResponseFilter*>& responseFilters() {
  static const std::vector<const ResponseFilter*> chain{
      &usageScanFilter(), &usageStripFilter(), &tokenizeCheckFilter(), &responseIdFilter()};
  return chain;
}

}  // namespace kvgate::proxy
