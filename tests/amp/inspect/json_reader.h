#pragma once
// A minimal JSON reader for the inspector tests: enough to read back what the inspectors write
// (objects, arrays, strings without \u escapes beyond ASCII, numbers, true/false/null).
#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace hg::test {

struct Json {
  enum class Type { Null, Bool, Number, String, Array, Object } type = Type::Null;
  bool boolean = false;
  double number = 0;
  std::string str;
  std::vector<Json> array;
  std::map<std::string, Json> object;

  const Json& operator[](const std::string& key) const {
    const auto it = object.find(key);
    if (type != Type::Object || it == object.end()) throw std::runtime_error("json: no key '" + key + "'");
    return it->second;
  }
  const Json& operator[](size_t i) const { return array.at(i); }
};

class JsonReader {
 public:
  explicit JsonReader(std::string text) : s_(std::move(text)) {}
  Json parse() {
    Json v = value();
    skip();
    if (i_ != s_.size()) fail("trailing text");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("json: " + what + " at offset " + std::to_string(i_));
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  char peek() {
    skip();
    if (i_ >= s_.size()) fail("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  bool literal(const std::string& word) {
    if (s_.compare(i_, word.size(), word) != 0) return false;
    i_ += word.size();
    return true;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c == '\\') {
        const char e = s_.at(i_++);
        if (e == 'u') {
          c = static_cast<char>(std::strtol(s_.substr(i_, 4).c_str(), nullptr, 16));
          i_ += 4;
        } else {
          c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
        }
      }
      out += c;
    }
    expect('"');
    return out;
  }
  Json value() {
    Json v;
    const char c = peek();
    if (c == '{') {
      v.type = Json::Type::Object;
      ++i_;
      if (peek() == '}') return ++i_, v;
      do {
        const std::string k = string();
        expect(':');
        v.object[k] = value();
      } while (peek() == ',' && ++i_);
      expect('}');
    } else if (c == '[') {
      v.type = Json::Type::Array;
      ++i_;
      if (peek() == ']') return ++i_, v;
      do v.array.push_back(value());
      while (peek() == ',' && ++i_);
      expect(']');
    } else if (c == '"') {
      v.type = Json::Type::String;
      v.str = string();
    } else if (literal("true") || literal("false")) {
      v.type = Json::Type::Bool;
      v.boolean = s_[i_ - 1] == 'e' && s_[i_ - 2] == 'u';
    } else if (literal("null")) {
      v.type = Json::Type::Null;
    } else {
      char* end = nullptr;
      v.number = std::strtod(s_.c_str() + i_, &end);
      if (end == s_.c_str() + i_) fail("bad value");
      v.type = Json::Type::Number;
      i_ = static_cast<size_t>(end - s_.c_str());
    }
    return v;
  }

  std::string s_;
  size_t i_ = 0;
};

}  // namespace hg::test
