#pragma once
// Point-cloud registration as flashot-gui runs it, apart from any thread or widget: the CLI's own code
// (workflow::register_clouds for rigid / similarity / affine, workflow::register_nonrigid for the displacement
// field, `flashot register`), the parameters the panel edits, and what the panel shows and saves.

#include <array>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dataset.hpp"
#include "flashot/workflow/nonrigid.hpp"
#include "task_worker.hpp"
#include "flashot/workflow/registration.hpp"

namespace flashot::gui {

/// The registration panel's fields; the defaults are `flashot register`'s.
struct RegistrationParameters {
  std::string model = "rigid";  ///< rigid | similarity | affine | nonrigid
  double blur = 0;              ///< final blur (data units); 0 = 0.01 × the clouds' diameter
  double start_blur = 0;        ///< first round's blur; 0 = 0.5 × diameter
  double anneal = 0.7;          ///< in (0, 1)
  int max_rounds = 60;
  double reach = 0;             ///< both sides, data units; 0 = the relative default below
  /// Without a reach: TARGET's reach = this × diameter (the CLI's --rel-reach); 0 = balanced.
  double reach_target_relative = workflow::RegistrationOptions::kDefaultReachTargetRelative;
  double kernel_width = 0;       ///< nonrigid: 0 = 0.1 × diameter
  double regularization = 1e-2;  ///< nonrigid
  std::size_t control_points = 200;  ///< nonrigid
  std::string backend = "auto";
  std::string multiscale = "auto";  ///< the rounds' solves: auto | on | off (`flashot register --multiscale`)
};

inline constexpr const char* kRegistrationModels[] = {"rigid", "similarity", "affine", "nonrigid"};
inline constexpr const char* kMultiscaleChoices[] = {"auto", "on", "off"};

/// Every problem with `p`, one message each naming the field and the value (empty when valid), with the CLI's
/// wording ("anneal must be in (0, 1) (got 1.5)").
std::vector<std::string> validate(const RegistrationParameters& p);
/// The CLI's options for `p` (the affine models). Throws std::invalid_argument with the first problem.
workflow::RegistrationOptions registration_options(const RegistrationParameters& p);
workflow::NonrigidOptions nonrigid_options(const RegistrationParameters& p);

struct RegistrationInput {
  std::vector<float> source;  ///< (n × 3) moved
  std::vector<float> target;  ///< (m × 3) fixed
  std::string key;            ///< the space both were read from ("xyz", an obsm key)
  RegistrationParameters parameters;
};

/// The points of `key` in both data sets as a registration input: 3 columns required (PLY xyz, a 3-column obsm
/// entry). Throws std::invalid_argument naming the file, the key and its width otherwise.
RegistrationInput registration_input(const Dataset& source, const Dataset& target, const std::string& key,
                                     const RegistrationParameters& parameters);

struct RegistrationOutcome {
  std::string model;
  std::string key;
  std::size_t n = 0, m = 0;
  std::vector<float> registered;            ///< (n × 3) the source moved onto the target
  std::optional<workflow::Transform> transform;  ///< rigid / similarity / affine
  std::array<double, 3> rotation_axis{0, 0, 1};
  double rotation_degrees = 0;
  std::size_t control_points = 0;  ///< nonrigid
  double kernel_width = 0;         ///< nonrigid
  double rms = 0;                  ///< weighted RMS to the OT correspondences (the CLI's "rms")
  double transported_mass = 1;     ///< share of the source's mass the final plan moves
  double diameter = 0;
  double final_blur = 0;
  bool converged = false;
  bool cancelled = false;  ///< stopped by the progress callback: nothing to show or save
  std::vector<workflow::RegistrationRound> rounds;
  std::string multiscale = "auto";  ///< the setting the rounds' solves ran with
  std::size_t multiscale_rounds = 0;  ///< rounds whose solve ran the multiscale solver
  /// The last round's solve: why multiscale was or was not used, and the share of the point pairs its last stage
  /// visited (1 for a dense solve).
  std::string multiscale_reason;
  double multiscale_kept_fraction = 1;
  int iterations = 0;
  std::string backend;
  double seconds = 0;
  std::vector<std::string> warnings;  ///< workflow::registration_warnings (affine models)
};

/// `progress(round, max_rounds, epsilon, rms)` after each round, on the calling thread; false cancels.
using RegistrationCallback = std::function<bool(int, int, double, double)>;

/// Runs the registration the CLI runs. `solve_progress(round, check)` is called at every marginal-error check of
/// every round's solve (a multiscale solve's coarser level included), on the calling thread; false from either
/// callback cancels — from `solve_progress` in the middle of the solve. Throws std::invalid_argument for bad
/// parameters or points.
RegistrationOutcome run_registration(const RegistrationInput& input, const RegistrationCallback& progress,
                                     const workflow::SolveProgress& solve_progress = {});

/// The progress line at a check of round `round` of `rounds`: "round 3/60 · stage 7/7 · ε 0.000592 · iteration 40 ·
/// marginal error 1.31e-02"; a multiscale solve's coarser level settling says "stage 7/7 (coarse level)" and an
/// intermediate stage, which has no error, leaves the error out.
QString check_text(int round, int rounds, const Progress& check);

/// The register panel's job for a TaskWorker: run_registration with a progress report after every round ("round
/// 3/60 · ε … · rms …") and at every check of a round's solve (check_text), the bar at the rounds done; Cancel
/// (TaskWorker::cancel) stops the running solve at its next check. The result is the RegistrationOutcome, null
/// when cancelled.
TaskWorker::Job registration_job(std::shared_ptr<const RegistrationInput> input);

/// The panel's text: the 4×4 matrix, rotation angle and axis, scale, translation (or the field's size), the
/// residual (rms, transported mass), rounds and time, and any warning.
std::string describe(const RegistrationOutcome& outcome);

/// The registered source as `flashot register -o` writes it: PLY with x, y, z moved, the originals kept as
/// x_original, y_original, z_original, every other vertex property kept; .h5ad: obsm `<key>_flashot`. Written to a
/// temporary file renamed at the end; a destination that is the source or the target is refused
/// (workflow::PathError) before anything is written.
void save_registered(const Dataset& source, const Dataset& target, const RegistrationOutcome& outcome,
                     const std::filesystem::path& path);

}  // namespace flashot::gui
