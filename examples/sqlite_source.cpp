// The SQLite source actor: one connection and one prepared statement per actor.
#include "examples/sqlite_source.hpp"

#include <sqlite3.h>

#include <cstring>
#include <memory>

#include "core/ops/factory.hpp"

namespace actorch::examples {

namespace {

using db_ptr = std::unique_ptr<sqlite3, int (*)(sqlite3*)>;
using stmt_ptr = std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)>;

db_ptr open_db(const std::string& path, int flags) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  db_ptr out(db, sqlite3_close);
  // SQLite says "unable to open database file"; the system's errno says why.
  const int sys_errno = db ? sqlite3_system_errno(db) : 0;
  ACTORCH_CHECK(rc == SQLITE_OK, "sqlite: cannot open ", path, ": ",
                db ? sqlite3_errmsg(db) : sqlite3_errstr(rc),
                sys_errno ? std::string(" (") + std::strerror(sys_errno) + ")" : std::string());
  return out;
}

stmt_ptr prepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* st = nullptr;
  const int rc = sqlite3_prepare_v2(db, sql, -1, &st, nullptr);
  ACTORCH_CHECK(rc == SQLITE_OK, "sqlite: cannot prepare '", sql, "': ", sqlite3_errmsg(db));
  return stmt_ptr(st, sqlite3_finalize);
}

void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  ACTORCH_CHECK(rc == SQLITE_OK, "sqlite: '", sql, "' failed: ", msg);
}

struct source_state {
  std::string path;
  db_ptr db{nullptr, sqlite3_close};
  stmt_ptr select{nullptr, sqlite3_finalize};
};

data::sample read_row(source_state& st, int64_t index) {
  sqlite3_stmt* s = st.select.get();
  sqlite3_reset(s);
  sqlite3_bind_int64(s, 1, index);
  const int rc = sqlite3_step(s);
  ACTORCH_CHECK(rc == SQLITE_ROW, "no row with id ", index, " in ", st.path,
                rc == SQLITE_DONE ? "" : std::string(": ") + sqlite3_errmsg(st.db.get()));
  ACTORCH_CHECK(sqlite3_column_type(s, 0) == SQLITE_INTEGER, "row with id ", index, " in ", st.path,
                ": label is not an integer");
  const int64_t label = sqlite3_column_int64(s, 0);
  ACTORCH_CHECK(sqlite3_column_type(s, 1) == SQLITE_BLOB, "row with id ", index, " in ", st.path,
                ": features is not a blob of float32 values");
  const auto* blob = static_cast<const char*>(sqlite3_column_blob(s, 1));
  const int bytes = sqlite3_column_bytes(s, 1);
  ACTORCH_CHECK(bytes % int(sizeof(float)) == 0, "row with id ", index, " in ", st.path,
                ": features holds ", bytes, " bytes, not a whole number of float32 values");
  tensor x = empty({int64_t(bytes) / int64_t(sizeof(float))});
  if (bytes > 0)
    std::memcpy(x.data_ptr(), blob, size_t(bytes));
  return data::sample::make_tuple({x, label});
}

actors::source_actor::behavior_type
sqlite_source(actors::source_actor::stateful_pointer<source_state> self, std::string path) {
  self->state.path = std::move(path);
  return {
      [self](actors::load_atom, const actors::index_batch& task) -> actors::loaded_batch {
        auto& st = self->state;
        actors::loaded_batch out;
        out.run_id = task.run_id;
        out.seq = task.seq;
        out.collated = false; // the loader's collate stage stacks the samples
        data::sample::tuple samples;
        for (int64_t index : task.indices) {
          try {
            if (!st.db) { // opened lazily, on this actor's own thread
              st.db = open_db(st.path, SQLITE_OPEN_READONLY);
              st.select = prepare(st.db.get(), "SELECT label, features FROM samples WHERE id = ?");
            }
            samples.push_back(read_row(st, index));
          } catch (const std::exception& e) {
            out.error = "sqlite source failed on sample index " + std::to_string(index) +
                        " (batch " + std::to_string(task.seq) + "): " + e.what();
            return out;
          }
        }
        out.data = data::sample(std::move(samples));
        return out;
      },
  };
}

} // namespace

void write_sqlite_samples(const std::string& path, const std::vector<std::vector<float>>& features,
                          const std::vector<int64_t>& labels) {
  ACTORCH_CHECK(features.size() == labels.size(), "write_sqlite_samples: ", features.size(),
                " feature rows but ", labels.size(), " labels");
  auto db = open_db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  exec(db.get(), "DROP TABLE IF EXISTS samples");
  exec(db.get(), "CREATE TABLE samples(id INTEGER PRIMARY KEY, label INTEGER, features BLOB)");
  exec(db.get(), "BEGIN");
  auto ins = prepare(db.get(), "INSERT INTO samples(id, label, features) VALUES (?, ?, ?)");
  for (size_t i = 0; i < labels.size(); ++i) {
    sqlite3_reset(ins.get());
    sqlite3_bind_int64(ins.get(), 1, int64_t(i));
    sqlite3_bind_int64(ins.get(), 2, labels[i]);
    // An empty row's data() may be null, which would bind NULL: an empty blob instead.
    if (features[i].empty())
      sqlite3_bind_zeroblob(ins.get(), 3, 0);
    else
      sqlite3_bind_blob(ins.get(), 3, features[i].data(), int(features[i].size() * sizeof(float)),
                        SQLITE_TRANSIENT);
    ACTORCH_CHECK(sqlite3_step(ins.get()) == SQLITE_DONE,
                  "sqlite: insert failed: ", sqlite3_errmsg(db.get()));
  }
  exec(db.get(), "COMMIT");
}

int64_t sqlite_sample_count(const std::string& path) {
  auto db = open_db(path, SQLITE_OPEN_READONLY);
  auto st = prepare(db.get(), "SELECT COUNT(*) FROM samples");
  ACTORCH_CHECK(sqlite3_step(st.get()) == SQLITE_ROW, "sqlite: cannot count rows of ", path);
  return sqlite3_column_int64(st.get(), 0);
}

actors::source_actor spawn_sqlite_source(caf::actor_system& sys, const std::string& path) {
  return sys.spawn<caf::detached>(sqlite_source, path);
}

} // namespace actorch::examples
