// kvgate: one binary, several roles. Parses the subcommand and hands over.
#include <cstdio>
#include <cstring>
#include <string>

namespace kvgate {
int serveMain(int argc, char** argv);
namespace sim {
int main(int argc, char** argv);
}
namespace ctl {
int main(int argc, char** argv);
}
namespace bench {
int main(int argc, char** argv);
}
namespace tok {
int tokenizeMain(int argc, char** argv);
}
namespace hints {
int indexMain(int argc, char** argv);
int lookupBench(int argc, char** argv);
}
}  // namespace kvgate

static void usage(FILE* out) {
  std::fprintf(out,
               "kvgate: inference-aware LLM gateway\n\n"
               "usage: kvgate <command> [flags]\n\n"
               "commands:\n"
               "  serve   run the gateway (data plane + management API)\n"
               "  sim     run a simulated engine fleet (vLLM dialect)\n"
               "  index   the LookupRoute routing-hint service (gRPC, inference-cache "
               "contract)\n"
               "  ctl     manage a running gateway over its REST API\n"
               "  bench   load generators (bench sse: SSE relay delay; bench fleet: routing "
               "policies compared\n"
               "          on a fleet; bench tokenize; bench lookup; bench quota: shared quota\n"
               "          store admissions/s; bench relay: a TCP relay adding delay)\n"
               "  tokenize  print a prompt's token ids as the gateway computes them\n\n"
               "Run 'kvgate <command> --help' for the flags of each command.\n");
}

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "serve") return kvgate::serveMain(argc - 1, argv + 1);
  if (cmd == "sim") return kvgate::sim::main(argc - 1, argv + 1);
  if (cmd == "ctl") return kvgate::ctl::main(argc - 1, argv + 1);
  if (cmd == "index") return kvgate::hints::indexMain(argc - 1, argv + 1);
  if (cmd == "bench" && argc >= 3 && std::strcmp(argv[2], "lookup") == 0)
    return kvgate::hints::lookupBench(argc - 2, argv + 2);
  if (cmd == "bench") return kvgate::bench::main(argc - 1, argv + 1);
  if (cmd == "tokenize") return kvgate::tok::tokenizeMain(argc - 1, argv + 1);
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage(stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    std::printf("kvgate 0.1.0\n");
    return 0;
  }
  std::fprintf(stderr, "kvgate: unknown command '%s'\n\n", cmd.c_str());
  usage(stderr);
  return 2;
}
