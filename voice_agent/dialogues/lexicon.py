"""Word banks for the scripted callers: names from many cultures, and phrasings per act.

Held-out means unseen: `split_names` keeps a fifth of the first names and of the surnames out of
training, and every phrasing bank below is split by template index (`bank(..., split)`), so the
held-out calls use names and sentences the model never trained on.
"""

from __future__ import annotations

import random

FIRST = """Aaliyah Aarav Abdul Ada Adebayo Adrian Afua Agnieszka Ahmed Aiko Aisha Akira Alan Alejandro Aleksandr Alice
Alina Amara Amelia Amir Ana Anders Andrea Andrei Angela Anika Anita Ann Anton Arjun Astrid Aurora Ayesha Beatriz
Ben Bianca Bilal Bjorn Bogdan Bruno Camila Carlos Carmen Catalina Cheng Chiara Chloe Chidi Chinedu Clara Daniel
Dario Darius David Deepa Diego Dmitri Dong Eamon Eduardo Elena Elif Eliza Emeka Emil Emma Enzo Erik Esra Esther
Ewa Fatima Felipe Fernando Fiona Folake Francesca Gabriel Grace Greta Gustavo Hana Hannah Haruto Hassan Helga
Hiroshi Hugo Ibrahim Ifeoma Igor Ines Ingrid Irina Isabel Ivan Jakub Jamal James Jana Javier Jia Joao Jonas
Jordan Jose Joseph Julia Julian Jun Kai Kamal Karim Karin Kasia Kateryna Kavya Keanu Kenji Khalid Kofi Kwame
Laila Lars Laura Leila Leon Lina Liam Lucia Luis Lukas Maeve Malik Marek Maria Mariam Marta Mateo Mehmet Mei Mia
Miguel Mikhail Mina Mohammed Nadia Naledi Nia Niamh Nikhil Nina Noah Nora Obi Olga Oliver Omar Oscar Pablo Paolo
Pedro Pia Pooja Priya Rafael Rahul Rania Ravi Rin Rosa Rui Ryan Sakura Salma Samir Sana Santiago Sara Sean
Sergio Shira Siddharth Simone Siobhan Sofia Sven Tariq Tatiana Teresa Thabo Theo Tomas Uma Valentina Vikram
Wei Wiktor Xin Yara Yasmin Yusuf Yuki Zainab Zara Zeynep Zoltan Zoe Beau Cosmo Delphine Ezra Freya Gideon Imogen
Juno Kit Lorcan Marisol Octavia Perpetua Quentin Rosalind Soren Thaddeus Ulla Vesna Wren Ximena Yolanda Zebedee
Agathe Bartholomew Cressida Dagny Eulalia Florentin Gwendolyn Horatio Isolde Jerome Kerensa Ludovic""".split()

LAST = """Abara Abbott Acheampong Adeyemi Agarwal Ahmadi Akhtar Alvarez Andersen Araujo Asante Bakshi Balogun Banerjee
Barros Becker Bergstrom Bianchi Bondarenko Brennan Brooks Bui Caldwell Campos Carvalho Castillo Chandra Chen Cho
Costa Cruz Dahl Dang Das Dimitrov Dinh Dlamini Dominguez Doyle Dubois Duarte Eriksen Esposito Farouk Fernandes
Ferrari Fischer Fitzgerald Fontaine Fujita Gallagher Garcia Ghosh Goldberg Gomez Gonzalez Greenberg Gruber
Gupta Haddad Hakimi Hansen Hartmann Hashemi Herrera Hoang Hoffmann Horvath Hughes Ibekwe Iglesias Ito Ivanova
Jablonski Jansen Jimenez Johansson Kaczmarek Kamara Kapoor Katz Kaur Keller Khan Kim Kowalski Kuznetsov Lange
Larsen Le Lee Lehmann Leone Lindqvist Lopez Lund Maalouf Mahmoud Malik Mancini Marino Martins Mazur Mbeki
Medina Mehta Mensah Meyer Mishra Molina Moreau Moreno Morris Mukherjee Murphy Nakamura Navarro Ndlovu Nguyen
Nielsen Novak Nowak Nwosu Obi O'Brien Okafor Okonkwo Oliveira Olsen Ortiz Osei Ozturk Pacheco Park Patel Pereira
Perez Petrov Pham Popescu Quinn Rahman Ramirez Rao Reyes Ricci Rivera Romano Rossi Ruiz Saito Salazar Santos
Sato Schmidt Schneider Sharma Shevchenko Silva Singh Sokolov Sorensen Suarez Suzuki Svensson Takahashi Tan Tanaka
Teixeira Thompson Torres Tran Tsai Turner Usman Vargas Vasquez Verma Vogel Volkov Wagner Walsh Wang Weber Wojcik
Wong Wu Xu Yadav Yamamoto Yilmaz Yoon Zhang Zhou Zielinski Zimmermann Achterberg Blackwood Cavendish Delacroix
Esterhuizen Featherstone Grimaldi Honeycutt Ingleby Jovanovic Kirkpatrick Lockhart Montgomery Nightingale
Oyelaran Pemberton Quigley Rutherford Stavros Thistlewood Underhill Vanterpool Winterbottom Yeboah Zabaleta""".split()


def split_names(rng: random.Random) -> dict[str, tuple[list[str], list[str]]]:
    """{'train': (firsts, lasts), 'heldout': (firsts, lasts)}: disjoint fifths held out."""
    firsts, lasts = sorted(set(FIRST)), sorted(set(LAST))
    r = random.Random(rng.random())
    r.shuffle(firsts)
    r.shuffle(lasts)
    nf, nl = len(firsts) // 5, len(lasts) // 5
    return {"heldout": (firsts[:nf], lasts[:nl]), "train": (firsts[nf:], lasts[nl:])}


# Phrasings. {svc} {day} {time} {name} {first} are filled in; each bank is split by template index.
BOOK = ["I'd like to book {svc}", "I need to make an appointment for {svc}", "can I get {svc}",
        "I want to schedule {svc}", "I'm calling to book {svc}", "could you fit me in for {svc}",
        "I'd like to come in for {svc}", "I need {svc}", "do you have room for {svc}",
        "I was hoping to book {svc}", "can you put me down for {svc}", "I'd love to set up {svc}",
        "I need to see someone for {svc}", "is it possible to book {svc}", "I'm looking to get {svc} done"]
BOOK_NOSVC = ["I'd like to make an appointment", "I need to book a visit", "can I book an appointment",
              "I want to come in to see the dentist", "I'm calling to set up an appointment",
              "I need an appointment", "could I book a time to come in", "I'd like to schedule a visit"]
DAY = ["{day}", "{day} please", "how about {day}", "{day} would be good", "could we do {day}",
       "I was thinking {day}", "{day} works for me", "maybe {day}", "is {day} possible", "let's say {day}",
       "I can do {day}", "{day} if you have it"]
TIME = ["{time}", "{time} please", "{time} works", "how about {time}", "{time} would be great",
        "let's do {time}", "I'll take {time}", "can I have {time}", "{time} is good for me", "make it {time}",
        "{time} if that's free", "I prefer {time}"]
DAYTIME = ["{day} at {time}", "{day} at {time} please", "{time} on {day}", "{day} around {time}",
           "do you have {day} at {time}", "could I come {day} at {time}", "{day} {time}",
           "I'm free {day} at {time}", "is {time} {day} open"]
NAME = ["my name is {name}", "it's {name}", "{name}", "this is {name}", "the name is {name}", "I'm {name}",
        "{name} speaking", "under {name} please", "you can put it under {name}", "it's for {name}",
        "sure it's {name}", "my name's {name}"]
# A caller who gives their name before the request ("hi, this is Maria Lopez, I need to cancel").
INTRO = ["this is {name}", "my name is {name}", "it's {name} here", "{name} here", "I'm {name}",
         "hi my name's {name}", "this is {name} calling", "yeah this is {name}", "{name} calling",
         "it's {name}", "hello this is {name}", "the name is {name}"]
MORNING = ["do you have anything in the morning", "something in the morning would be best",
           "mornings are better for me", "anything before lunch", "is there a morning slot",
           "I can only do mornings", "early in the day if possible", "what do you have in the morning"]
AFTERNOON = ["do you have anything in the afternoon", "afternoons work better for me",
             "something after lunch please", "is there an afternoon slot", "later in the day would be good",
             "I can only do afternoons", "what do you have in the afternoon"]
FREE = ["what times do you have {day}", "what's free {day}", "do you have any openings {day}",
        "is there anything available {day}", "when are you free {day}", "what does {day} look like",
        "any free slots {day}", "can you tell me what's open {day}"]
MOVE = ["I need to move my appointment", "can I reschedule my appointment", "I have to change my appointment",
        "I'd like to reschedule", "something came up and I need a different time", "can we push my visit",
        "I need to change the time of my appointment", "could you move my booking", "I want to switch my appointment",
        "my appointment doesn't work anymore can I change it"]
CANCEL = ["I need to cancel my appointment", "please cancel my appointment", "I want to cancel my visit",
          "I can't make my appointment", "call off my visit please", "I won't be able to come in so cancel it",
          "could you cancel my booking", "I'd like to cancel", "scrap my appointment please",
          "I have to cancel my appointment", "take me off the schedule please"]
LOOKUP = ["when is my appointment", "can you check when my next appointment is", "do I have an appointment coming up",
          "I forgot when my appointment is", "what time is my visit", "could you look up my appointment",
          "I want to confirm my appointment", "when am I booked in"]
CORRECT = ["sorry I meant {time}", "oh wait actually {time}", "no sorry {time} not that", "I said {time} sorry",
           "actually can we make it {time}", "oops I meant {time}", "hmm could it be {time} instead",
           "sorry my mistake {time} please"]
THANKS = ["great thanks bye", "perfect thank you goodbye", "thanks so much bye", "that's all thanks",
          "ok thank you bye bye", "wonderful thanks have a good day", "no that's it thanks bye",
          "thank you that's everything", "cheers bye", "great that's all I needed"]
OFFTOPIC = ["can you recommend a good pizza place", "what's the weather going to be like", "who won the game last night",
            "can you tell me a joke", "do you know a good plumber", "what's the capital of australia",
            "can you order me a taxi", "what do you think about politics", "can you help me with my taxes",
            "is the bank open today"]
FAQ = {
    "hours": ["what are your opening hours", "when are you open", "what time do you close", "are you open on saturdays",
              "what are your hours", "how late are you open"],
    "address": ["where are you located", "what's your address", "where is the clinic", "how do I find you"],
    "parking": ["is there parking", "can I park near you", "where do I park", "do you have a car park"],
    "insurance": ["do you take aetna", "what insurance do you accept", "do you accept my insurance",
                  "is cigna ok", "do you take delta dental"],
    "prices": ["how much is a cleaning", "what does a checkup cost", "how much do you charge for whitening",
               "what are your prices", "how much is a filling"],
    "payment": ["can I pay by card", "do you take cash", "how can I pay", "do you take apple pay"],
}
OPENERS = ["", "", "", "hi ", "hello ", "hi there ", "good morning ", "hey ", "yes hi ", "um hi ", "hello um ",
           "good afternoon ", "hi yes "]
SERVICE_PHRASES = {
    "cleaning": ["a cleaning", "a teeth cleaning", "a hygiene visit", "a clean", "a scale and polish",
                 "my teeth cleaned", "a cleaning appointment", "a hygienist appointment"],
    "checkup": ["a checkup", "a check-up", "an exam", "a routine checkup", "my yearly checkup", "a dental exam",
                "a check up"],
    "filling": ["a filling", "a cavity filled", "a filling done", "a cavity looked at"],
    "whitening": ["whitening", "teeth whitening", "my teeth whitened", "a whitening session"],
    "emergency": ["an emergency visit", "something urgent for a toothache", "an emergency appointment",
                  "help with a broken tooth", "someone to look at my toothache"],
}
SVC_ANSWER = ["{svc}", "it's for {svc}", "just {svc}", "I need {svc}", "{svc} please", "I'd like {svc}"]


def bank(items: list[str], split: str, rng: random.Random) -> str:
    """A phrasing from `items`: every fifth template (index % 5 == 4) is held out, the rest train."""
    pool = [t for i, t in enumerate(items) if (i % 5 == 4) == (split == "heldout")] or items
    return rng.choice(pool)
