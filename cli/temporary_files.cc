#include "cli/temporary_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fragscope::cli {
namespace {

constexpr std::string_view kMarker = ".fragscope-tmp.";
constexpr size_t kMaxNameBytes = 120;  // of the output's name in the temporary's
constexpr size_t kRandomDigits = 16;

// This machine's name as it appears in temporaries: letters, digits and '-' (no '.', which
// separates the parts).
std::string HostPart() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "host";
  std::string out;
  for (const char* c = host; *c != '\0' && out.size() < 32; ++c) {
    const bool plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                       (*c >= '0' && *c <= '9') || *c == '-';
    out.push_back(plain ? *c : '-');
  }
  return out.empty() ? "host" : out;
}

std::string Prefix(const std::string& name) {
  return absl::StrCat(name.substr(0, kMaxNameBytes), std::string(kMarker), HostPart(), ".");
}

bool IsHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Registered temporaries. A slot is claimed (kWriting) before its path is copied in and read by
// the handler only once kReady: no allocation or lock in the handler.
enum SlotState : int { kFree = 0, kWriting = 1, kReady = 2 };
constexpr size_t kSlots = 32;
std::array<std::atomic<int>, kSlots> slot_state{};
char slot_path[kSlots][PATH_MAX];

void OnSignal(int signal) {
  RemoveRegisteredTemporaries();
  // Then die of the signal as if there were no handler.
  struct sigaction action = {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  sigaction(signal, &action, nullptr);
  raise(signal);
}

void InstallHandlers() {
  for (int signal : {SIGINT, SIGTERM}) {
    struct sigaction current = {};
    if (sigaction(signal, nullptr, &current) != 0) continue;
    if ((current.sa_flags & SA_SIGINFO) != 0 || current.sa_handler != SIG_DFL) continue;
    struct sigaction action = {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    sigaction(signal, &action, nullptr);
  }
}

}  // namespace

std::string TemporaryName(const std::string& name) {
  uint64_t random = 0;
  if (getrandom(&random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
    // No kernel randomness: still unique (O_EXCL retries) though guessable.
    static std::atomic<uint64_t> counter{0};
    random = (static_cast<uint64_t>(getpid()) << 32) ^ ++counter ^
             static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&random));
  }
  return absl::StrCat(Prefix(name), getpid(), ".", absl::StrFormat("%016x", random));
}

int RemoveStaleTemporaries(const std::string& dir, const std::string& name) {
  const std::string prefix = Prefix(name);
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  while (const dirent* entry = readdir(d)) {
    const std::string_view file = entry->d_name;
    if (!file.starts_with(prefix)) continue;
    // PID.RANDOM after the prefix.
    const std::string_view rest = file.substr(prefix.size());
    const size_t dot = rest.find('.');
    if (dot == std::string_view::npos || rest.size() - dot - 1 != kRandomDigits ||
        !IsHex(rest.substr(dot + 1))) {
      continue;
    }
    int pid = 0;
    if (!absl::SimpleAtoi(std::string(rest.substr(0, dot)), &pid) || pid <= 0 || pid == getpid())
      continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    struct stat st = {};
    if (fstatat(dirfd(d), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) continue;
    if (unlinkat(dirfd(d), entry->d_name, 0) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

int RegisterTemporary(const std::string& path) {
  static std::once_flag installed;
  std::call_once(installed, InstallHandlers);
  if (path.size() >= PATH_MAX) return -1;
  for (size_t i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!slot_state[i].compare_exchange_strong(expected, kWriting)) continue;
    std::memcpy(slot_path[i], path.c_str(), path.size() + 1);
    slot_state[i].store(kReady);
    return static_cast<int>(i);
  }
  return -1;
}

void UnregisterTemporary(int slot) {
  if (slot >= 0 && static_cast<size_t>(slot) < kSlots)
    slot_state[static_cast<size_t>(slot)].store(kFree);
}

void RemoveRegisteredTemporaries() {
  for (size_t i = 0; i < kSlots; ++i) {
    if (slot_state[i].load() == kReady) unlink(slot_path[i]);
  }
}

}  // namespace fragscope::cli
