// A reader-writer lock that prefers writers (glibc's pthread rwlock with
// PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP). std::shared_mutex on glibc prefers readers: a
// steady stream of readers on several threads can hold a writer off without bound. Here a
// waiting writer stops new readers. Not recursive: a thread that holds it shared must not take
// it shared again (a writer waiting in between would deadlock it). Meets SharedMutex, so
// std::shared_lock and std::unique_lock work with it.
#pragma once
#include <pthread.h>

#include <system_error>

namespace kvgate::common {

class RwLock {
 public:
  RwLock() {
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
#ifdef __GLIBC__
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
    int rc = pthread_rwlock_init(&l_, &a);
    pthread_rwlockattr_destroy(&a);
    if (rc != 0) throw std::system_error(rc, std::generic_category(), "pthread_rwlock_init");
  }
  ~RwLock() { pthread_rwlock_destroy(&l_); }
  RwLock(const RwLock&) = delete;
  RwLock& operator=(const RwLock&) = delete;

  void lock() { pthread_rwlock_wrlock(&l_); }
  bool try_lock() { return pthread_rwlock_trywrlock(&l_) == 0; }
  void unlock() { pthread_rwlock_unlock(&l_); }
  void lock_shared() { pthread_rwlock_rdlock(&l_); }
  bool try_lock_shared() { return pthread_rwlock_tryrdlock(&l_) == 0; }
  void unlock_shared() { pthread_rwlock_unlock(&l_); }

 private:
  pthread_rwlock_t l_;
};

}  // namespace kvgate::common
